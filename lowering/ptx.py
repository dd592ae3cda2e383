"""One small function per PTX instruction, each emitted as LLVM inline asm.

All shared-memory addresses here are 32-bit (``r`` constraints, never ``l``):
``.shared::cluster`` addresses fit in 32 bits, 32-bit arithmetic is cheaper,
and ``[addr+imm]`` lets ptxas fold constant offsets into the store.
"""

from __future__ import annotations

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import llvm

__all__ = [
    "emit_mapa", "emit_cluster_ctarank", "emit_st_async", "emit_red_async", "emit_st_plain",
    "emit_red_plain", "emit_arrive_expect_tx", "emit_tcgen05_fence_before_thread_sync",
    "emit_tcgen05_fence_after_thread_sync",
    "emit_shfl_bfly",
    "emit_bounded_wait", "emit_wait_parity_cluster", "emit_fence_cta",
]


def _i32():
  return ir.IntegerType.get_signless(32)


def _void():
  return ir.Type.parse("!llvm.void")


def _addr(imm: int) -> str:
  return f"[$0+{imm}]" if imm else "[$0]"


def _data(first: int, n: int) -> str:
  ops = ", ".join(f"${first + i}" for i in range(n))
  return ops if n == 1 else "{" + ops + "}"


def _constraint(value: ir.Value) -> str:
  width = ir.IntegerType(value.type).width
  return {16: "h", 32: "r", 64: "l"}[width]


def emit_mapa(addr: ir.Value, rank: ir.Value) -> ir.Value:
  """``mapa.shared::cluster.u32 $0, $1, $2;``: this CTA's SMEM address in CTA ``rank``."""
  return llvm.inline_asm(_i32(), [addr, rank], "mapa.shared::cluster.u32 $0, $1, $2;",
                         "=r,r,r", has_side_effects=False)


def emit_st_async(addr: ir.Value, imm: int, words: list[ir.Value], opcode: str,
                  barrier: ir.Value) -> None:
  """``<opcode> [$0+imm], {..}, [$n];`` for an ``st.async`` opcode from the plan
  (``Instruction.opcode``, e.g. ``st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32``).

  ``words`` are i32 values (1, 2 or 4 of them for b32, v2.b32, v4.b32).
  """
  n = len(words)
  asm = f"{opcode} {_addr(imm)}, {_data(1, n)}, [${n + 1}];"
  llvm.inline_asm(_void(), [addr, *words, barrier], asm, "r," + "r," * n + "r",
                  has_side_effects=True)


def emit_red_async(addr: ir.Value, imm: int, value: ir.Value, opcode: str,
                   barrier: ir.Value) -> None:
  """``<opcode> [$0+imm], $1, [$2];`` for a ``red.async`` opcode from the plan, e.g.
  ``red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes.add.u32``."""
  asm = f"{opcode} {_addr(imm)}, $1, [$2];"
  llvm.inline_asm(_void(), [addr, value, barrier], asm,
                  f"r,{_constraint(value)},r", has_side_effects=True)


def emit_st_plain(addr: ir.Value, imm: int, words: list[ir.Value], opcode: str) -> None:
  """``<opcode> [$0+imm], $1;`` for a plain ``st`` opcode from the plan, e.g.
  ``st.shared::cluster.u16`` (u8/u16 take the low bits of an i32).

  The plan spells the executing CTA's own window ``st.shared::cta``, which
  takes the ordinary local STS path (``ptx_forms.state_space``).
  """
  n = len(words)
  asm = f"{opcode} {_addr(imm)}, {_data(1, n)};"
  llvm.inline_asm(_void(), [addr, *words], asm, "r" + ",r" * n, has_side_effects=True)


def emit_red_plain(addr: ir.Value, imm: int, value: ir.Value, opcode: str) -> None:
  """``<opcode> [$0+imm], $1;`` for a plain ``red`` opcode from the plan, e.g.
  ``red.relaxed.cluster.shared::cta.add.f32``.

  ``.shared::cta`` (the executing CTA's own window, ``ptx_forms.state_space``)
  makes ptxas emit native shared-memory atomics (ATOMS, or an ATOMS.CAST loop
  for float adds) instead of a generic ATOM with a state-space check and
  fallbacks, which is what a ``.shared::cluster`` address gets (f32 add: 562
  vs 1514 SASS).
  """
  asm = f"{opcode} {_addr(imm)}, $1;"
  llvm.inline_asm(_void(), [addr, value], asm, f"r,{_constraint(value)}",
                  has_side_effects=True)


def emit_arrive_expect_tx(barrier: ir.Value, tx: ir.Value, *, release_cluster: bool,
                          peer: bool = False) -> None:
  """``mbarrier.arrive.expect_tx{.release.cluster|.relaxed.cluster}.shared::cluster.b64 _,
  [$0], $1;``

  One arrival that also announces ``tx`` bytes.  ``release_cluster`` orders
  this thread's earlier plain stores and reductions (which no tx count tracks)
  before the arrival, at cluster scope; plans made only of st.async/red.async
  need no release (each of those completes on the barrier's tx count, which makes
  its bytes visible to the waiters; the cluster-scope release costs a MEMBAR).  On a
  ``peer`` plan's barrier such an arrival is ``.relaxed.cluster`` (PTX ISA 8.6,
  sm_90): it only counts.  Not the default ``.release.cta``, whose release would
  claim an ordering that the ISA gives no thread of another CTA (the checker's
  warning ``peer-arrive-cta``); on the executing CTA's own barrier the default
  ``.release.cta`` orders its plain stores for its own waiters.
  """
  sem = ".release.cluster" if release_cluster else ".relaxed.cluster" if peer else ""
  asm = f"mbarrier.arrive.expect_tx{sem}.shared::cluster.b64 _, [$0], $1;"
  llvm.inline_asm(_void(), [barrier, tx], asm, "r,r", has_side_effects=True)


def emit_tcgen05_fence_before_thread_sync() -> None:
  """``tcgen05.fence::before_thread_sync;``: orders this thread's earlier tcgen05
  operations (tensor-memory loads, MMAs) before the thread synchronisation that
  follows, as an arrival on an ``orders_tensor_core`` barrier must (PTX ISA,
  tcgen05 memory consistency; sm_100a and newer)."""
  llvm.inline_asm(_void(), [], "tcgen05.fence::before_thread_sync;", "",
                  has_side_effects=True)


def emit_tcgen05_fence_after_thread_sync() -> None:
  """``tcgen05.fence::after_thread_sync;``: orders this thread's later tcgen05
  operations after the thread synchronisation before it (a wait on an
  ``orders_tensor_core`` barrier); sm_100a and newer."""
  llvm.inline_asm(_void(), [], "tcgen05.fence::after_thread_sync;", "",
                  has_side_effects=True)


def emit_shfl_bfly(value: ir.Value, lane_mask: int) -> ir.Value:
  """``shfl.sync.bfly.b32 $0, $1, <mask>, 31, -1;``: the value of lane ``lane ^ mask``."""
  return llvm.inline_asm(_i32(), [value],
                         f"shfl.sync.bfly.b32 $0, $1, {lane_mask}, 31, -1;",
                         "=r,r", has_side_effects=True)


def emit_cluster_ctarank() -> ir.Value:
  """``mov.u32 $0, %cluster_ctarank;``: the executing CTA's linear rank in its cluster
  (inline asm: the NVVM op's Python builder differs between jaxlib versions)."""
  return llvm.inline_asm(_i32(), [], "mov.u32 $0, %cluster_ctarank;", "=r",
                         has_side_effects=False)


def emit_bounded_wait(barrier: ir.Value, parity, max_polls: int) -> ir.Value:
  """Polls ``mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64`` at most
  ``max_polls`` times.  Cluster-scope acquire: the data it waits for was
  released at cluster scope by another CTA (st.async completions, release arrives).

  ``parity`` is a Python int or an i32 value.  Returns i32 1 if the phase
  completed, 0 if it gave up: a barrier whose transaction count never
  reaches zero then ends with a flag instead of hanging the kernel.
  ``${:uid}`` keeps the labels unique per use.
  """
  operands = [barrier] + ([] if isinstance(parity, int) else [parity])
  par = str(parity) if isinstance(parity, int) else "$2"
  asm = (
      "{\n"
      ".reg .pred %p<2>;\n"
      ".reg .b32 %n;\n"
      "mov.b32 %n, 0;\n"
      "mov.b32 $0, 1;\n"
      "WAIT${:uid}:\n"
      f"mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 %p0, [$1], {par};\n"
      "@%p0 bra DONE${:uid};\n"
      "add.u32 %n, %n, 1;\n"
      f"setp.lt.u32 %p1, %n, {max_polls};\n"
      "@%p1 bra WAIT${:uid};\n"
      "mov.b32 $0, 0;\n"
      "DONE${:uid}:\n"
      "}"
  )
  constraints = "=r,r" + ("" if isinstance(parity, int) else ",r")
  return llvm.inline_asm(_i32(), operands, asm, constraints, has_side_effects=True)


def emit_wait_parity_cluster(barrier: ir.Value, parity: ir.Value, ticks: ir.Value) -> None:
  """Loops on ``mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64`` until the
  phase of ``parity`` has completed (upstream's wait, with cluster-scope acquire).

  Upstream's ``BarrierRef.wait_parity`` polls the same instruction without
  qualifiers, i.e. ``.acquire.cta`` (PTX ISA, mbarrier.try_wait), which does not
  synchronize with a ``.release.cluster`` arrive made in another CTA (the
  scopes must include each other: Memory Consistency Model, morally strong
  operations).  ``ticks`` is the suspend-time hint upstream passes; ``${:uid}``
  keeps the label unique per use.
  """
  asm = ("{\n"
         ".reg .pred %done;\n"
         "WAIT${:uid}:\n"
         "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 %done, [$0], $1, $2;\n"
         "@!%done bra.uni WAIT${:uid};\n"
         "}")
  llvm.inline_asm(_void(), [barrier, parity, ticks], asm, "r,r,r", has_side_effects=True)


def emit_fence_cta() -> None:
  """``fence.acq_rel.cta;``: memory operations do not move across it."""
  llvm.inline_asm(_void(), [], "fence.acq_rel.cta;", "", has_side_effects=True)
