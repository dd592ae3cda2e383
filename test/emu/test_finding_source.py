"""A finding names the user's Python line (``Finding.source``), and a write after an
unordered read is named write-after-read.

``check`` compiles the kernel with line info (``toolchain.mlir_to_ptx(line_info=True)``:
``.file`` / ``.loc`` in the PTX), the checker reads the last ``.loc`` before each
instruction, and a finding carries the source of its instruction and, for a race or an
early read, of the earlier access.  The kernels here mark their statements with a
comment (``# <zero>``); the expected lines are found from the markers, never written as
numbers.
"""

import pathlib
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

from mosaic_async_store import check as mas_check
from mosaic_async_store import compat
from mosaic_async_store import pallas as mas_pallas
from mosaic_async_store.check import check_ptx, lineinfo
from mosaic_async_store.check.memory import SCHEDULES
from ptx_harness import kernel
import pallas_run

SHAPE = (64, 64)
HERE = pathlib.Path(__file__).resolve()


def _line(marker: str) -> int:
  """The line of this file that ends with the comment ``# <marker>`` (a statement's
  first line: the line jax gives its operations)."""
  lines = HERE.read_text().splitlines()
  [n] = [i for i, text in enumerate(lines, 1) if text.rstrip().endswith(f"# <{marker}>")]
  return n


def _at(source: str | None) -> tuple[pathlib.Path, int] | None:
  if source is None:
    return None
  path, _, line = source.rpartition(":")
  return pathlib.Path(path).resolve(), int(line)


def _reduce_into_cta0(cluster_barrier: bool, arrivals: int = 2):
  """Each CTA of two reduces its tile into CTA 0's SMEM (docs/examples/reduce_into_cta0
  .py); without the cluster barrier, CTA 1's reduction races CTA 0's zeroing.  The
  barrier expects ``arrivals`` (more than the two stores: CTA 0's wait hangs)."""
  def body(x_ref, o_ref, smem, bar):
    cta = jax.lax.axis_index("cluster")
    smem[...] = jnp.zeros(SHAPE, jnp.int32)  # <zero>
    if cluster_barrier:
      pallas_run._cluster_sync()   # (the harness's fence and cluster barrier)
    x = compat.pallas_load(x_ref.at[cta], layout=plgpu.Layout.WGMMA, optimized=False)
    mas_pallas.async_store_smem(x, smem, bar.at[0], cluster_idx=0,  # <reduce>
                                cluster_dim="cluster", atomic="add")

    @pl.when(cta == 0)
    def _():
      plgpu.barrier_wait(bar.at[0])  # <wait>
      compat.pallas_store(o_ref, compat.pallas_load(smem, layout=plgpu.Layout.WGMMA,
                                                    optimized=False))
  return plgpu.kernel(
      body, out_type=jax.ShapeDtypeStruct(SHAPE, jnp.int32), grid=(1,), grid_names=("g",),
      cluster=(2,), cluster_names=("cluster",),
      scratch_types=[plgpu.SMEM(SHAPE, jnp.int32),
                     plgpu.Barrier(num_arrivals=arrivals, num_barriers=1)],
      compiler_params=plgpu.CompilerParams(lowering_semantics=plgpu.LoweringSemantics.Lane))


def _x():
  return np.random.default_rng(0).integers(-1000, 1000, (2, *SHAPE)).astype(np.int32)


def test_a_race_names_the_python_lines_of_both_accesses():
  """Without the cluster barrier every schedule finds the race between the zeroing
  and the peer's reduction; each finding names one of the two statements (the one
  whose instruction found it), and the other one when the earlier access is known."""
  zero, reduce = (HERE, _line("zero")), (HERE, _line("reduce"))
  report = mas_check.check(_reduce_into_cta0(cluster_barrier=False), _x())
  # (several findings a schedule: the run goes on after a race; findings.py)
  assert {f.schedule for f in report.findings} == {0, 1, 2}, str(report)
  for f in report.findings:
    assert f.rule in ("race", "early-read"), f
    assert _at(f.source) in (zero, reduce), f
    if f.other_source is not None:
      assert {_at(f.source), _at(f.other_source)} == {zero, reduce}, f
    assert f"test_finding_source.py:{_at(f.source)[1]}), schedule" in str(f)
  assert any(f.other_source is not None for f in report.findings), str(report)


def test_the_clean_neighbour_has_no_finding():
  x = _x()
  report = mas_check.check(_reduce_into_cta0(cluster_barrier=True), x)
  assert report.ok and report.findings == (), str(report)
  assert np.array_equal(report.outputs[0], x.sum(axis=0))


def test_a_hang_names_the_barrier_as_the_kernel_does():
  """The barrier expects three arrivals and gets two: CTA 0's wait hangs in every
  schedule, and the finding names the barrier by the expression the kernel passes
  (``bar.at[0]``) and the lines that use it: the store's and the wait's."""
  report = mas_check.check(_reduce_into_cta0(cluster_barrier=True, arrivals=3), _x())
  assert [f.schedule for f in report.findings] == [0, 1, 2], str(report)
  for f in report.findings:
    assert f.rule == "hang", f
    named = re.search(r"mbarrier of CTA 0 at offset 0x[0-9a-f]+ \(the kernel's `bar\.at\[0\]`, "
                      r"used at ([^ ]+):(\d+), (\d+)\)", f.message)
    assert named, f.message
    path, *lines = named.groups()
    assert pathlib.Path(path).resolve() == HERE
    assert {int(n) for n in lines} == {_line("reduce"), _line("wait")}, f.message


# What line info adds to the PTX: the .file table, a .loc before each source line's
# instructions, labels for them, and an empty debug section.
_LINE_INFO_LINES = re.compile(r"\s*(\.loc|\.file|\.section|\$L__(tmp|func_begin|func_end)\d+:)")


def test_line_info_adds_directives_and_changes_no_instruction():
  """``check``'s PTX is the normal compile's plus line info naming this file; the normal
  compile's PTX has none (it stays byte-identical to what it was)."""
  from mosaic_async_store.tools import check_kernel, toolchain
  from mosaic_async_store.tools.user_kernel import kernel_specs, lower_kernel
  fn = _reduce_into_cta0(cluster_barrier=True)
  specs, _ = kernel_specs(fn, (_x(),))
  _, with_lines = check_kernel._lower(fn, specs)
  plain = toolchain.mlir_to_ptx(lower_kernel(fn, specs))
  assert ".loc" not in plain and ".file" not in plain
  assert HERE in {pathlib.Path(f).resolve() for f in lineinfo.file_table(with_lines).values()}
  assert [line for line in with_lines.splitlines() if not _LINE_INFO_LINES.match(line)] == \
      plain.splitlines()


def test_the_tool_cache_keys_on_line_info():
  """test/harness/tool_cache.py keys a cached mlir-opt run on its bound positional
  arguments: ``line_info`` is one of them (a line-info run never answers a plain one)."""
  import inspect
  from mosaic_async_store.tools import toolchain
  signature = inspect.signature(getattr(toolchain._run_mlir_opt, "__wrapped__",
                                        toolchain._run_mlir_opt))
  keys = []
  for kwargs in ({}, {"line_info": True}):
    bound = signature.bind("text", "sm_90a", **kwargs)
    bound.apply_defaults()
    keys.append(bound.args)
  assert keys == [("text", "sm_90a", False), ("text", "sm_90a", True)]
  outline, translate = toolchain.pipeline_stages("sm_90a", line_info=True)
  assert (outline, translate.replace(toolchain._LINE_INFO_PASS + ",", "")) == \
      toolchain.pipeline_stages("sm_90a")


# -- hand-written PTX with and without line info --------------------------------------

# Threads 0 and 1 both write SMEM word 0, unordered: a race in every schedule.  The
# line info says the store is line 7 of /src/racy.py (.file at the end, as the NVPTX
# backend writes it for a kernel compiled with line info, after a debug section).
_RACY = kernel("""
  mov.u32 %r3, __dynamic_shmem__0;
  setp.gt.u32 %p1, %r1, 1;
  @%p1 bra END;
  .loc 1 7 5
  st.shared.u32 [%r3], %r1;
  .loc 1 0 5
END:
""")
_LINE_INFO = _RACY.rstrip() + '\n\t.section\t.debug_macinfo\t{\t}\n\t.file\t1 "/src/racy.py"\n'


def _racy(ptx):
  return check_ptx(ptx, [np.zeros(1, np.int32)], smem_bytes=16, block=32, schedules=1)


def test_ptx_with_line_info_gives_each_finding_its_source():
  [f] = _racy(_LINE_INFO).findings
  assert f.rule == "race" and f.source == "/src/racy.py:7" and f.other_source == f.source
  assert "PTX line" in str(f) and "(/src/racy.py:7), schedule 0" in str(f)
  assert "(/src/racy.py:7): `st.shared.u32" in f.message   # the earlier access's too


def test_ptx_without_line_info_gives_no_source():
  no_loc = "\n".join(line for line in _RACY.splitlines() if ".loc" not in line)
  for ptx in (no_loc, _RACY):   # no .loc; a .loc whose file the PTX does not name
    [f] = _racy(ptx).findings
    assert f.rule == "race" and f.source is None and f.other_source is None
    assert "racy.py" not in str(f)


# -- write-after-read -------------------------------------------------------------------

# Thread 0 reads SMEM word 4, then raises a flag (word 0) with a relaxed store; thread 1
# polls the flag relaxed and then writes word 4.  The read comes first in every
# schedule, and nothing orders it before the write (relaxed: no release, no acquire).
_WAR = kernel("""
  mov.u32 %r3, __dynamic_shmem__0;
  setp.eq.u32 %p1, %r1, 0;
  @%p1 st.shared.u32 [%r3], 0;
  bar.sync 0;
  setp.gt.u32 %p2, %r1, 1;
  @%p2 bra END;
  @%p1 bra READER;
POLL:
  ld.relaxed.cta.shared.u32 %r4, [%r3];
  setp.eq.u32 %p3, %r4, 0;
  @%p3 bra POLL;
  st.shared.u32 [%r3+4], 7;
  bra END;
READER:
  ld.shared.u32 %r5, [%r3+4];
  st.relaxed.cta.shared.u32 [%r3], 1;
END:
""")


def _war_findings(ptx, **launch):
  """The findings of every schedule of ``SCHEDULES`` (CI's, or the slow mode's)."""
  report = check_ptx(ptx, [np.zeros(1, np.int32)], block=32, schedules=len(SCHEDULES),
                     **launch)
  assert [f.schedule for f in report.findings] == list(SCHEDULES), str(report)
  return report.findings


def test_a_write_after_an_unordered_read_is_named_so():
  for f in _war_findings(_WAR, smem_bytes=16):
    assert f.rule == "race" and "write-after-read" in f.message, f
    assert "thread 1 writes CTA 0 SMEM bytes 4..7, read by CTA 0 thread 0" in f.message, f
  ordered = _WAR.replace("ld.relaxed.cta", "ld.acquire.cta").replace("st.relaxed.cta",
                                                                     "st.release.cta")
  assert check_ptx(ordered, [np.zeros(1, np.int32)], smem_bytes=16, block=32,
                   schedules=len(SCHEDULES)).ok


# CTA 1 st.asyncs word 0 into CTA 0 (phase 0); CTA 0's thread 0 waits for the phase,
# reads the word and raises a relaxed flag (word 16); CTA 1 polls the flag relaxed and
# st.asyncs the word again (phase 1), which CTA 0 waits for before it exits.  The second
# store lands over data CTA 1 never observed, but the cause is the read it is not
# ordered after: a write-after-read race, not an early read.
_ASYNC_WAR = kernel("""
  mov.u32 %r3, __dynamic_shmem__0;
  add.u32 %r4, %r3, 32;
  setp.ne.u32 %p1, %r1, 0;
  setp.eq.u32 %p2, %r2, 0;
  @%p1 bra SYNC;
  @!%p2 bra SYNC;
  st.shared.u32 [%r3+16], 0;
  mbarrier.init.shared.b64 [%r4], 1;
  fence.mbarrier_init.release.cluster;
SYNC:
  barrier.cluster.arrive.aligned;
  barrier.cluster.wait.aligned;
  @%p1 bra END;
  @%p2 bra CONSUMER;
  mov.u32 %r9, 0;
  mapa.shared::cluster.u32 %r5, %r3, %r9;
  mapa.shared::cluster.u32 %r6, %r4, %r9;
  mov.u32 %r10, 7;
  mbarrier.arrive.expect_tx.release.cluster.shared::cluster.b64 _, [%r6], 4;
  st.async.shared::cluster.mbarrier::complete_tx::bytes.u32 [%r5], %r10, [%r6];
POLL:
  ld.relaxed.cluster.shared::cluster.u32 %r7, [%r5+16];
  setp.eq.u32 %p3, %r7, 0;
  @%p3 bra POLL;
  mbarrier.arrive.expect_tx.release.cluster.shared::cluster.b64 _, [%r6], 4;
  st.async.shared::cluster.mbarrier::complete_tx::bytes.u32 [%r5], %r10, [%r6];
  bra END;
CONSUMER:
  mov.u32 %r11, 0;
WAIT0:
  mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 %p4, [%r4], %r11;
  @!%p4 bra WAIT0;
  ld.shared.u32 %r8, [%r3];
  st.relaxed.cluster.shared.u32 [%r3+16], 1;
  mov.u32 %r11, 1;
WAIT1:
  mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 %p4, [%r4], %r11;
  @!%p4 bra WAIT1;
END:
""")


def test_an_asynchronous_store_over_an_unordered_read_is_write_after_read():
  for f in _war_findings(_ASYNC_WAR, smem_bytes=48, cluster=2):
    assert f.rule == "race" and "write-after-read" in f.message, f
    assert "st.async into CTA 0 writes CTA 0 SMEM bytes 0..3, read by CTA 0 thread 0" in \
        f.message, f
  ordered = _ASYNC_WAR.replace("ld.relaxed.cluster", "ld.acquire.cluster").replace(
      "st.relaxed.cluster", "st.release.cluster")
  assert check_ptx(ordered, [np.zeros(1, np.int32)], smem_bytes=48, block=32, cluster=2,
                   schedules=len(SCHEDULES)).ok
