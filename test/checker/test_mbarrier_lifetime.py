"""An mbarrier's lifetime (check/sync.py: ``_inval_ordered``, ``_object_write``):
``mbarrier.init`` and ``mbarrier.inval`` write the barrier's 8 bytes, so plain
accesses to them before the init or after the inval must be ordered with them, and
an inval must come after every other thread's operation on the barrier.

PTX ISA, mbarrier.inval: "Performing any mbarrier operation except mbarrier.init on an
invalidated mbarrier object results in undefined behaviour"; mbarrier: accessing an
initialised mbarrier's memory other than through mbarrier operations is undefined; an
operation that may run after the inval (it is not ordered before it) may be one of
those.  Each wrong kernel is reported in every schedule (which rule depends on the
interleaving the schedule makes), next to a correct neighbour that passes in every
schedule; each kernel assembles with ptxas for sm_90a.
"""

import numpy as np
import pytest

from ptx_harness import SCHEDULES, assemble, kernel, launch

# Thread 0 initialises the barrier (count 1) at SMEM 0 and arrives; thread 1 waits for
# the phase; then {ORDER}; thread 0 invalidates it; then {AFTER}.
_LIFETIME = """
  mov.u32 %r3, __dynamic_shmem__0;
  setp.eq.u32 %p1, %r1, 0;
  setp.eq.u32 %p2, %r1, 1;
  @%p1 mbarrier.init.shared::cta.b64 [%r3], 1;
  bar.sync 0;
  @%p1 mbarrier.arrive.shared::cta.b64 %rd1, [%r3];
  @!%p2 bra WAITED;
WAIT:
  mbarrier.try_wait.parity.shared::cta.b64 %p3, [%r3], 0;
  @!%p3 bra WAIT;
WAITED:
  {ORDER}
  @%p1 mbarrier.inval.shared::cta.b64 [%r3];
  {AFTER}
"""
_SYNC = "bar.sync 0;"
_WRITE = "@%p2 st.shared.u32 [%r3], %r1;"


def _run(body, schedule):
  """None, or the kernel's first finding."""
  _, found = launch(kernel(body), [np.zeros(4, np.int32)], cluster=1, smem_bytes=64,
                    block=64, schedule=schedule)
  return found[0] if found else None


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_an_inval_unordered_with_another_threads_wait_is_reported(schedule):
  err = _run(_LIFETIME.format(ORDER="", AFTER=""), schedule)
  assert err is not None and err.rule in ("race", "barrier-uninit"), err
  if err.rule == "race":   # the wait ran before the inval, unordered with it
    assert "invalidates" in err.message and "thread 1" in err.message, err.message
    assert (err.access.thread, err.access.kind) == (0, "mbarrier.inval"), err.access
    assert (err.other.thread, err.other.kind) == (1, "mbarrier operation"), err.other
    assert "try_wait" in err.other.instruction and err.missing


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_an_inval_after_a_cta_barrier_passes(schedule):
  assert _run(_LIFETIME.format(ORDER=_SYNC, AFTER=""), schedule) is None


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_write_to_the_bytes_unordered_with_the_inval_is_reported(schedule):
  err = _run(_LIFETIME.format(ORDER=_SYNC, AFTER=_WRITE), schedule)
  assert err is not None and err.rule in ("race", "barrier-memory"), err


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_write_to_the_bytes_after_the_inval_and_a_barrier_passes(schedule):
  assert _run(_LIFETIME.format(ORDER=_SYNC, AFTER=_SYNC + "\n  " + _WRITE), schedule) is None


# Thread 1 writes SMEM word 0; then {ORDER}; thread 0 initialises a barrier there.
_INIT_OVER = """
  mov.u32 %r3, __dynamic_shmem__0;
  setp.eq.u32 %p1, %r1, 0;
  setp.eq.u32 %p2, %r1, 1;
  @%p2 st.shared.u32 [%r3], %r1;
  {ORDER}
  @%p1 mbarrier.init.shared::cta.b64 [%r3], 1;
  bar.sync 0;
"""


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_an_init_over_bytes_another_thread_wrote_unordered_is_reported(schedule):
  err = _run(_INIT_OVER.format(ORDER=""), schedule)
  assert err is not None and err.rule in ("race", "barrier-memory"), err


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_an_init_after_a_barrier_passes(schedule):
  assert _run(_INIT_OVER.format(ORDER=_SYNC), schedule) is None


def test_the_kernels_assemble():
  for body in (_LIFETIME.format(ORDER="", AFTER=_WRITE),
               _LIFETIME.format(ORDER=_SYNC, AFTER=_SYNC + "\n  " + _WRITE),
               _INIT_OVER.format(ORDER="")):
    assemble(kernel(body))
