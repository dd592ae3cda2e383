"""A race's and an early read's accesses as data (``Finding.access``, ``.other``,
``.missing``; ``memory.Access``): who, CTA, thread, kind, memory, PTX line and
instruction of each side, and what would have ordered them."""

import numpy as np

from mosaic_async_store.check import Access, check_ptx
from ptx_harness import kernel
from test_global_memory import _WRITE_READ, _WRITE_WRITE


def _findings(body, cluster=1):
  report = check_ptx(kernel(body), [np.zeros(8, np.int32)], smem_bytes=64, block=64,
                     cluster=(cluster, 1, 1))
  assert not report.ok
  return report.findings


def test_a_write_write_race_names_both_writes_as_data():
  for f in _findings(_WRITE_WRITE.format(ORDER="", AT=0)):
    assert f.rule == "race" and isinstance(f.access, Access) and isinstance(f.other, Access)
    assert {f.access.thread, f.other.thread} == {0, 32}
    assert f.access.kind == f.other.kind == "write"
    assert f.access.cta == f.other.cta == 0
    assert "argument 0" in f.access.memory and "bytes 0..3" in f.access.memory
    assert "st.global" in f.access.instruction and f.access.ptx_line == f.ptx_line
    assert "st.global" in f.other.instruction and f.other.ptx_line != f.ptx_line
    assert f.missing and f.missing in f.message


def test_a_read_after_an_unordered_write_is_a_read_against_a_write():
  for f in _findings(_WRITE_READ.format(ORDER="")):
    kinds = {(f.access.thread, f.access.kind), (f.other.thread, f.other.kind)}
    assert kinds == {(0, "write"), (32, "read")}, kinds


# Thread 0 of CTA 0 stores into CTA 1's SMEM word 0 with st.async on CTA 1's mbarrier
# (at 8, expecting 4 bytes); thread 0 of CTA 1 reads the word before waiting.
_EARLY = """
  mov.u32 %r3, __dynamic_shmem__0;
  setp.eq.u32 %p1, %r1, 0;
  @!%p1 bra END;
  add.u32 %r4, %r3, 8;
  mbarrier.init.shared::cta.b64 [%r4], 1;
  setp.eq.u32 %p2, %r2, 1;
  @%p2 mbarrier.arrive.expect_tx.shared::cta.b64 %rd1, [%r4], 4;
  barrier.cluster.arrive.release;
  barrier.cluster.wait.acquire;
  @%p2 bra READ;
  mapa.shared::cluster.u32 %r5, %r3, 1;
  mapa.shared::cluster.u32 %r6, %r4, 1;
  st.async.shared::cluster.mbarrier::complete_tx::bytes.u32 [%r5], 7, [%r6];
  bra DONE;
READ:
  ld.shared.u32 %r7, [%r3];
WAIT:
  mbarrier.try_wait.parity.shared::cta.b64 %p3, [%r4], 0;
  @!%p3 bra WAIT;
DONE:
  barrier.cluster.arrive.release;
  barrier.cluster.wait.acquire;
  bra FIN;
END:
  barrier.cluster.arrive.release;
  barrier.cluster.wait.acquire;
  barrier.cluster.arrive.release;
  barrier.cluster.wait.acquire;
FIN:
"""


def test_an_early_read_names_the_asynchronous_store_as_data():
  # Where the store lands first, the read is early (the phase was not observed); where
  # the read comes first, the landing store is a write-after-read race; where the read
  # meets it in flight, there is no earlier access to name.
  findings = _findings(_EARLY, cluster=2)
  assert {f.schedule for f in findings} == {0, 1, 2}   # every schedule; each its first
  findings = [next(f for f in findings if f.schedule == s) for s in range(3)]
  for f in findings:
    assert f.rule in ("early-read", "race"), f
    read = f.access if f.access.kind == "read" else f.other
    assert (read.cta, read.thread, read.kind) == (1, 0, "read"), f
    assert "ld.shared" in read.instruction
    store = f.other if read is f.access else f.access
    if store is not None:
      assert store.kind == "asynchronous store" and "st.async" in store.instruction, f
      assert f.missing
    assert f.access.memory == "CTA 1 SMEM bytes 0..3", f.access
  assert any(f.rule == "early-read" and f.other is not None for f in findings)
