"""test/harness/check_cache.py, the cache of the checker's runs that .ci/run's later
stages share: ``record`` writes and never reads, ``replay`` answers a launch recorded
before (same PTX, inputs and keywords) with its outputs, findings and machine state,
and a different launch runs the checker."""

import pickle
import zlib

import numpy as np
import pytest

import check_cache
from mosaic_async_store.check.interp import PtxKernel
from ptx_harness import kernel

_RACE = kernel("""
  ld.param.u64 %rd1, [k_param_0];
  st.u32 [%rd1], %r1;
""")
_LAUNCH = dict(cluster=1, smem_bytes=16, block=4)


@pytest.fixture
def cache(tmp_path):
  """An empty cache directory; the session's own cache (.ci/run's stages install one)
  is set aside meanwhile and put back after."""
  session = check_cache.uninstall()
  with check_cache.bypassed(False):   # (test/conftest.py bypasses test/checker's runs)
    yield tmp_path
  check_cache.uninstall()
  if session is not None:
    check_cache.install(*session)


def _poisoned(directory):
  """Rewrites the one recorded entry to say something the checker never would."""
  [entry] = directory.iterdir()
  entry.write_bytes(zlib.compress(pickle.dumps((["poison"], (), {"executed": -1}))))


def test_replay_answers_a_recorded_launch(cache):
  check_cache.install(cache, "replay")
  first = PtxKernel(_RACE).launch([np.zeros(4, np.uint32)], **_LAUNCH)
  assert [f.rule for f in first.findings] == ["race"]
  again = PtxKernel(_RACE)
  same = again.launch([np.zeros(4, np.uint32)], **_LAUNCH)
  assert same.findings == first.findings and again.findings == first.findings
  _poisoned(cache)
  read = PtxKernel(_RACE)
  assert read.launch([np.zeros(4, np.uint32)], **_LAUNCH).outputs == ["poison"]
  assert read.executed == -1


def test_a_different_launch_runs_the_checker(cache):
  check_cache.install(cache, "replay")
  PtxKernel(_RACE).launch([np.zeros(4, np.uint32)], **_LAUNCH)
  _poisoned(cache)
  other = PtxKernel(_RACE).launch([np.ones(4, np.uint32)], **_LAUNCH)   # other inputs
  assert [f.rule for f in other.findings] == ["race"]
  one_thread = PtxKernel(_RACE).launch([np.zeros(4, np.uint32)], cluster=1, smem_bytes=16,
                                       block=1)
  assert one_thread.findings == () and one_thread.outputs is not None


def test_record_never_reads(cache):
  check_cache.install(cache, "record")
  PtxKernel(_RACE).launch([np.zeros(4, np.uint32)], **_LAUNCH)
  _poisoned(cache)
  assert [f.rule for f in PtxKernel(_RACE).launch([np.zeros(4, np.uint32)],
                                                  **_LAUNCH).findings] == ["race"]


def test_bypassed_launches_neither_read_nor_write(cache):
  check_cache.install(cache, "replay")
  with check_cache.bypassed():
    PtxKernel(_RACE).launch([np.zeros(4, np.uint32)], **_LAUNCH)
  assert list(cache.iterdir()) == []
