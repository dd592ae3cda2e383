"""The tcgen05 family's opcode table: the base opcode ``tcgen05``, dispatched on the
qualifier after it (``alloc``, ``ld``, ``cp``, ``wait::ld``, ``fence::after_thread_sync``, ...)
to the module that runs it; what is not run is refused by name."""

from __future__ import annotations

from mosaic_async_store.check.families.tcgen05 import alloc, commit, cp, ldst, mma, state
from mosaic_async_store.check.opcodes import Opcode

__all__ = ["OPCODES", "RULES", "WARNINGS", "fresh_state"]

# The operations and the module function that compiles each.
_HANDLERS = {
    "alloc": alloc.alloc, "dealloc": alloc.dealloc,
    "relinquish_alloc_permit": alloc.relinquish,
    "ld": ldst.load, "st": ldst.store, "wait::ld": ldst.wait, "wait::st": ldst.wait,
    "fence::before_thread_sync": ldst.fence, "fence::after_thread_sync": ldst.fence,
    "mma": mma.mma, "commit": commit.commit, "cp": cp.cp,
}
RULES = {**mma.RULES, **commit.RULES,
         "tcgen05-fence-operand": "PTX ISA 9.7.16.6.3: \"An asynchronous tcgen05 operation "
                                  "subsequent to a tcgen05.fence::after_thread_sync is "
                                  "ordered after all the prior tcgen05 and the execution "
                                  "ordering operations\": a tcgen05.mma or tcgen05.cp whose "
                                  "shared-memory operand only a synchronisation since its "
                                  "thread's last "
                                  "after-fence orders is not ordered after it, by the letter"}
# Rules of the family whose findings are warnings, with the evidence (memory.WARNINGS).
WARNINGS = {
    "tcgen05-fence-operand": "jax's Blackwell matmul (blackwell_matmul_mgpu, jax 0.12) "
                             "waits on its TMA barrier after its tcgen05.fence::"
                             "after_thread_sync and issues the MMAs; CUTLASS's SM100 "
                             "tutorial (04_mma_tma_2sm_sm100) issues tcgen05.mma right after "
                             "the TMA barrier wait, with no fence; jax 0.12.1's "
                             "async_copy_smem_to_tmem issues tcgen05.cp after the TMA "
                             "barrier wait, with no fence (test/emu/"
                             "test_tcgen05_calibration.py)",
}


def fresh_state():
  """The family's per-launch state (``Machine.tcgen05``)."""
  return state.Tcgen05()


def _tcgen05(k, ins):
  """Compiles a ``tcgen05`` instruction by its operation (the first qualifier)."""
  op = ins.mods[0] if ins.mods else ""
  handler = _HANDLERS.get(op)
  if handler is None:
    raise NotImplementedError(f"opcode {ins.opcode} (tcgen05.{op}: not run by the checker)")
  return handler(k, ins)


OPCODES = {
    "tcgen05": Opcode(_tcgen05, (
        "tcgen05.fence::before_thread_sync", "tcgen05.fence::after_thread_sync",
        "tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%r1], 128",
        "tcgen05.dealloc.cta_group::1.sync.aligned.b32 %r1, 128",
        "tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned",
        "tcgen05.ld.sync.aligned.32x32b.x2.b32 {%r1, %r2}, [%r3]",
        "tcgen05.ld.sync.aligned.16x256b.x1.b32 {%r1, %r2, %r3, %r4}, [%r5]",
        "tcgen05.st.sync.aligned.16x64b.x2.b32 [%r3], {%r1, %r2}",
        "tcgen05.wait::ld.sync.aligned", "tcgen05.wait::st.sync.aligned",
        "tcgen05.ld.sync.aligned.16x128b.x1.pack::16b.b32 {%r1, %r2}, [%r3]",
        "tcgen05.st.sync.aligned.32x32b.x2.unpack::16b.b32 [%r3], {%r1, %r2}",
        *mma.EXAMPLES, *commit.EXAMPLES, *cp.EXAMPLES), (
        "tcgen05.ld.sync.aligned.16x128b.x1.unpack::16b.b32 {%r1, %r2}, [%r3]",
        "tcgen05.ld.sync.aligned.16x32bx2.x1.b32 {%r1}, [%r3], 2",
        "tcgen05.shift.cta_group::1.down [%r1]", *mma.REFUSED, *commit.REFUSED,
        *cp.REFUSED)),
}
