"""The PTX checker's opcode table: every opcode it runs, which method compiles it,
and examples of the forms it runs and of those it refuses.

An instruction's base opcode (the text before the first ``.``) selects its
``Opcode``; the handler (a method of ``interp.PtxKernel``, or a ``module.function``
of a family module that ``interp._FAMILIES`` lists, e.g. ``warp.shfl``) checks the qualifiers
and operands and returns the function that executes the instruction, or raises
NotImplementedError naming the opcode.  A base opcode missing from the table is
refused the same way.  Everything happens when the kernel is parsed, so no
instruction is ever run with semantics the checker does not implement.

``examples`` and ``refused`` are whole PTX statements over the registers of
``EXAMPLE_REGISTERS``; test/emu/test_opcode_table.py compiles every one of them
(and runs the register-to-register ones against a reference computed another
way), so the table cannot drift from what the handlers accept.
"""

from __future__ import annotations

import dataclasses

from mosaic_async_store.check.ops import TYPE, bits_of

__all__ = ["Opcode", "Instr", "OPCODES", "EXAMPLE_REGISTERS", "decode"]

# The registers the examples name (test/emu/test_opcode_table.py declares them).
EXAMPLE_REGISTERS = (".reg .pred %p<8>;", ".reg .b16 %h<8>;", ".reg .b32 %r<32>;",
                     ".reg .b64 %rd<32>;", ".reg .f32 %f<8>;")


@dataclasses.dataclass(frozen=True)
class Opcode:
  """One base opcode: ``handler`` (the PtxKernel method, or ``module.function`` of a
  family module, that compiles it; None for
  ``bra``, which the parser resolves), statements it runs and statements it refuses."""

  handler: str | None
  examples: tuple[str, ...]
  refused: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Instr:
  """A decoded instruction, as handlers receive it.

  ``mods``: the qualifiers after the base opcode; ``types``: those that are
  types, ``t`` the last of them (``"b0"`` when none), ``bits`` / ``signed`` its
  width and signedness; ``space``: the state-space qualifier (None: generic);
  ``ops``: parsed operands (``interp.PtxKernel._operand``); ``src``: a getter per
  operand that has a value (None for the others); ``vals``: the getters of the
  stored values (the vector of a store, or its one value)."""

  opcode: str
  base: str
  mods: list
  types: list
  t: str
  bits: int
  signed: bool
  space: str | None
  ops: list
  src: list
  vals: list


def decode(opcode: str, ops: list, getter) -> Instr:
  """An ``Instr`` for ``opcode`` with parsed ``ops``; ``getter(op)`` makes a source
  operand's getter."""
  base, *mods = opcode.split(".")
  types = [p for p in mods if TYPE.match(p)]
  t = types[-1] if types else "b0"
  space = next((p for p in mods if p.split("::")[0] in ("global", "shared", "local",
                                                         "param", "const")), None)
  src = [getter(o) if o[0] in ("reg", "imm", "sym", "addr") else None for o in ops]
  vals = [getter(o) for o in ops[1][1]] if len(ops) > 1 and ops[1][0] == "vec" else src[1:2]
  return Instr(opcode, base, mods, types, t, bits_of(t), t[0] == "s", space, ops, src, vals)


_ALU_REFUSED = ("add.sat.s32 %r1, %r2, %r3", "add.cc.u32 %r1, %r2, %r3",
                "sub.cc.u32 %r1, %r2, %r3")
OPCODES: dict[str, Opcode] = {
    # -- register to register (values.py, floats.py) --------------------------------
    "mov": Opcode("_mov", ("mov.u32 %r1, %r2", "mov.b64 %rd1, 42", "mov.pred %p1, %p2",
                           "mov.b32 %r1, {%h1, %h2}", "mov.b64 {%r1, %r2}, %rd3"),
                  ("mov.sat.u32 %r1, %r2",)),
    "cvta": Opcode("_mov", ("cvta.shared.u64 %rd1, %rd2", "cvta.to.global.u64 %rd1, %rd2"),
                   ("cvta.const.u64 %rd1, %rd2",)),
    "add": Opcode("_arith", ("add.s32 %r1, %r2, %r3", "add.u64 %rd1, %rd2, 8",
                             "add.f32 %f1, %f2, %f3", "add.rn.ftz.f32 %f1, %f2, %f3",
                             "add.rz.f32 %f1, %f2, %f3", "add.rn.f16x2 %r1, %r2, %r3",
                             "add.rn.bf16 %h1, %h2, %h3"),
                  _ALU_REFUSED + ("add.sat.f32 %f1, %f2, %f3", "add.f64 %rd1, %rd2, %rd3",
                                  "add.ftz.bf16 %h1, %h2, %h3")),
    "sub": Opcode("_arith", ("sub.s32 %r1, %r2, %r3", "sub.u64 %rd1, %rd2, %rd3",
                             "sub.f32 %f1, %f2, %f3"), _ALU_REFUSED[2:]),
    "mul": Opcode("_arith", ("mul.lo.s32 %r1, %r2, %r3", "mul.wide.u32 %rd1, %r2, %r3",
                             "mul.wide.s32 %rd1, %r2, -3", "mul.rn.f32 %f1, %f2, %f3",
                             "mul.rn.bf16x2 %r1, %r2, %r3"),
                  ("mul.hi.u32 %r1, %r2, %r3", "mul.u32 %r1, %r2, %r3",
                   "mul.rn.sat.f32 %f1, %f2, %f3")),
    "mad": Opcode("_alu", ("mad.lo.s32 %r1, %r2, %r3, %r4", "mad.wide.u32 %rd1, %r2, %r3, %rd4"),
                  ("mad.hi.u32 %r1, %r2, %r3, %r4",)),
    "fma": Opcode("_arith", ("fma.rn.f32 %f1, %f2, %f3, %f4", "fma.rz.ftz.f32 %f1, %f2, %f3, %f4",
                             "fma.rn.bf16x2 %r1, %r2, %r3, %r4", "fma.rn.f16 %h1, %h2, %h3, %h4"),
                  ("fma.f32 %f1, %f2, %f3, %f4", "fma.rn.sat.f32 %f1, %f2, %f3, %f4",
                   "fma.rn.relu.bf16x2 %r1, %r2, %r3, %r4", "fma.rn.f64 %rd1, %rd2, %rd3, %rd4")),
    "neg": Opcode("_arith", ("neg.s32 %r1, %r2", "neg.f32 %f1, %f2")),
    "abs": Opcode("_arith", ("abs.f32 %f1, %f2", "abs.ftz.f32 %f1, %f2"),
                  ("abs.s32 %r1, %r2",)),
    "min": Opcode("_arith", ("min.s32 %r1, %r2, %r3", "min.u32 %r1, %r2, %r3",
                             "min.f32 %f1, %f2, %f3", "min.NaN.bf16x2 %r1, %r2, %r3"),
                  ("min.relu.s32 %r1, %r2, %r3", "min.xorsign.abs.f32 %f1, %f2, %f3")),
    "max": Opcode("_arith", ("max.s32 %r1, %r2, %r3", "max.u64 %rd1, %rd2, %rd3",
                             "max.ftz.NaN.f32 %f1, %f2, %f3", "max.f16 %h1, %h2, %h3"),
                  ("max.relu.f32 %f1, %f2, %f3",)),
    "and": Opcode("_alu", ("and.b32 %r1, %r2, %r3", "and.pred %p1, %p2, %p3")),
    "or": Opcode("_alu", ("or.b64 %rd1, %rd2, %rd3", "or.pred %p1, %p2, %p3")),
    "xor": Opcode("_alu", ("xor.b32 %r1, %r2, 255", "xor.pred %p1, %p2, %p3")),
    "not": Opcode("_alu", ("not.b32 %r1, %r2", "not.pred %p1, %p2")),
    "shl": Opcode("_alu", ("shl.b32 %r1, %r2, 3", "shl.b64 %rd1, %rd2, %r3")),
    "shr": Opcode("_alu", ("shr.u32 %r1, %r2, 3", "shr.s32 %r1, %r2, %r3",
                           "shr.u64 %rd1, %rd2, 40")),
    "selp": Opcode("_alu", ("selp.b32 %r1, %r2, %r3, %p1", "selp.u64 %rd1, %rd2, 7, %p1")),
    "bfe": Opcode("_alu", ("bfe.u32 %r1, %r2, 4, 8", "bfe.s32 %r1, %r2, %r3, %r4",
                           "bfe.u64 %rd1, %rd2, 30, 8")),
    "bfi": Opcode("_alu", ("bfi.b32 %r1, %r2, %r3, 4, 8",)),
    "prmt": Opcode("_alu", ("prmt.b32 %r1, %r2, %r3, 0x3210", "prmt.b32 %r1, %r2, %r3, %r4"),
                   ("prmt.b32.f4e %r1, %r2, %r3, %r4",)),
    "setp": Opcode("_setp", ("setp.eq.s32 %p1, %r2, %r3", "setp.lt.u32 %p1, %r2, 7",
                             "setp.ge.s64 %p1, %rd2, %rd3", "setp.hi.u64 %p1, %rd2, %rd3"),
                   ("setp.lt.f32 %p1, %f2, %f3", "setp.eq.and.s32 %p1, %r2, %r3, %p2",
                    "setp.eq.s32 %p1|%p2, %r2, %r3")),
    "cvt": Opcode("_cvt", ("cvt.u32.u64 %r1, %rd2", "cvt.s64.s32 %rd1, %r2",
                           "cvt.u64.u32 %rd1, %r2", "cvt.u16.u32 %h1, %r2",
                           "cvt.rn.bf16x2.f32 %r1, %f2, %f3", "cvt.rz.f16.f32 %h1, %f2",
                           "cvt.f32.bf16 %f1, %h2", "cvt.rn.satfinite.e4m3x2.f32 %h1, %f2, %f3"),
                  ("cvt.sat.s8.s32 %r1, %r2", "cvt.rn.f32.s32 %f1, %r2",
                   "cvt.rzi.s32.f32 %r1, %f2", "cvt.rn.e4m3x2.f32 %h1, %f2, %f3",
                   "cvt.rn.f32.f64 %f1, %rd2")),
    # -- memory (interp.py, access.py) ------------------------------------------------
    "ld": Opcode("_ld", ("ld.global.u32 %r1, [%rd2]", "ld.shared.v2.u32 {%r1, %r2}, [%r3+8]",
                         "ld.param.u64 %rd1, [%rd2]", "ld.u8 %h1, [%rd2]",
                         "ld.weak.shared.u32 %r1, [%r2]",
                         "ld.acquire.cluster.shared.u32 %r1, [%r2]",
                         "ld.relaxed.cta.shared::cluster.u32 %r1, [%r2]",
                         "ld.volatile.global.u64 %rd1, [%rd2]"),
                 ("ld.const.u32 %r1, [%rd2]", "ld.global.s8 %h1, [%rd2]",
                  "ld.acquire.shared.u32 %r1, [%r2]", "ld.release.cta.shared.u32 %r1, [%r2]",
                  "ld.relaxed.cta.shared.v2.u32 {%r1, %r2}, [%r3]",
                  "ld.mmio.relaxed.sys.global.u32 %r1, [%rd2]")),
    "st": Opcode("_st", ("st.global.u32 [%rd1], %r2", "st.shared.v4.b32 [%r1], {%r2, %r3, %r4, %r5}",
                         "st.shared::cluster.u32 [%r1], %r2",
                         "st.release.cluster.shared::cluster.u32 [%r1], %r2",
                         "st.relaxed.gpu.global.b64 [%rd1], %rd2", "st.volatile.shared.u32 [%r1], %r2",
                         "st.async.shared::cluster.mbarrier::complete_tx::bytes.u32 [%r1], %r2, [%r3]"),
                 ("st.async.shared::cluster.u32 [%r1], %r2", "st.acquire.cta.shared.u32 [%r1], %r2",
                  "st.release.shared.u32 [%r1], %r2",
                  "st.release.cta.shared.v2.u32 [%r1], {%r2, %r3}")),
    "red": Opcode("_red", ("red.shared::cluster.add.u32 [%r1], %r2",
                           "red.relaxed.cluster.shared::cluster.add.u32 [%r1], %r2",
                           "red.release.cluster.shared::cluster.add.u32 [%r1], %r2",
                           "red.shared::cluster.add.noftz.bf16x2 [%r1], %r2",
                           "red.shared::cta.add.f32 [%r1], %r2",
                           "red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes.add.u32 [%r1], %r2, [%r3]"),
                  ("red.acquire.cluster.shared::cluster.add.u32 [%r1], %r2",
                   "red.global.add.f64 [%rd1], %rd2", "red.shared.add.f16x2 [%r1], %r2",
                   "red.shared.add.noftz.f32 [%r1], %r2")),
    "atom": Opcode("_atom", ("atom.shared.add.u32 %r1, [%r2], 1",
                             "atom.acquire.cluster.shared::cluster.or.b32 %r1, [%r2], %r3",
                             "atom.acq_rel.gpu.global.cas.b64 %rd1, [%rd2], %rd3, %rd4",
                             "atom.release.cta.shared::cta.exch.b32 %r1, [%r2], %r3",
                             "atom.global.min.s32 %r1, [%rd2], %r3",
                             "atom.shared.add.f32 %f1, [%r2], %f3"),
                   ("atom.sc.gpu.global.add.u32 %r1, [%rd2], %r3",
                    "atom.shared.cas.b16 %h1, [%r2], %h3, %h4",
                    "atom.shared.add.f16 %h1, [%r2], %h3",
                    "atom.global.v2.f32.add %rd1, [%rd2], %rd3")),
    "mapa": Opcode("_mapa", ("mapa.shared::cluster.u32 %r1, %r2, %r3",
                             "mapa.shared::cluster.u64 %rd1, %rd2, 1")),
    "stmatrix": Opcode("_stmatrix_op", ("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%r1], {%r2, %r3, %r4, %r5}",
                                        "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%r1], {%r2, %r3, %r4, %r5}"),
                       ("stmatrix.sync.aligned.m8n8.x2.shared.b16 [%r1], {%r2, %r3}",)),
    "ldmatrix": Opcode("_ldmatrix_op", ("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r2, %r3, %r4, %r5}, [%r1]",
                                        "ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%r2}, [%r1]"),
                       ("ldmatrix.sync.aligned.m16n16.x1.trans.shared.b8 {%r2, %r3}, [%r1]",)),
    # -- synchronisation (sync.py) ----------------------------------------------------
    "mbarrier": Opcode("_mbarrier_op", (
        "mbarrier.init.shared.b64 [%r1], 1", "mbarrier.inval.shared.b64 [%r1]",
        "mbarrier.arrive.shared::cta.b64 %rd1, [%r1]",
        "mbarrier.arrive.expect_tx.release.cluster.shared::cluster.b64 _, [%r1], 16",
        "mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%r1], 16",
        "mbarrier.complete_tx.relaxed.cta.shared::cta.b64 [%r1], 16",
        "mbarrier.try_wait.parity.shared::cta.b64 %p1, [%r1], %r2",
        "mbarrier.try_wait.relaxed.cluster.shared::cta.b64 %p1, [%r1], %rd2",
        "mbarrier.test_wait.parity.shared::cta.b64 %p1, [%r1], 0"),
        ("mbarrier.pending_count.b64 %r1, %rd2", "mbarrier.arrive_drop.shared.b64 %rd1, [%r1]")),
    "fence": Opcode("_fence_op", ("fence.acq_rel.cta", "fence.sc.cluster", "fence.acquire.cluster",
                                  "fence.release.cluster", "fence.mbarrier_init.release.cluster",
                                  "fence.proxy.async.shared::cta",
                                  "fence.release.sync_restrict::shared::cta.cluster",
                                  "fence.acquire.sync_restrict::shared::cluster.cluster"),
                    ("fence.mbarrier_init.cluster", "fence.acquire.sync_restrict::shared::cta.cluster")),
    "membar": Opcode("_fence_op", ("membar.cta", "membar.gl", "membar.sys")),
    "bar": Opcode("_bar_op", ("bar.sync 0", "bar.sync 1, 128", "bar.warp.sync -1",
                              "bar.arrive 1, 128", "bar.cta.sync %r1, %r2"),
                  ("bar.arrive 1", "bar.red.popc.u32 %r1, 0, %p1", "bar.sync.foo 0")),
    "barrier": Opcode("_bar_op", ("barrier.sync 0", "barrier.sync.aligned 2, 64",
                                  "barrier.cta.arrive.aligned 3, 96", "barrier.cluster.arrive",
                                  "barrier.cluster.arrive.relaxed.aligned",
                                  "barrier.cluster.wait", "barrier.cluster.wait.aligned"),
                      ("barrier.cluster.arrive.acquire", "barrier.red.or.pred %p1, 0, %p2")),
    "shfl": Opcode("warp.shfl", ("shfl.sync.idx.b32 %r1, %r2, 0, 31, -1",
                                   "shfl.sync.bfly.b32 %r1|%p1, %r2, 1, 31, -1"),
                   ("shfl.sync.up.b32 %r1, %r2, 1, 0, -1",)),
    "elect": Opcode("warp.elect", ("elect.sync %r1|%p1, -1",)),
    "vote": Opcode("warp.vote", ("vote.sync.all.pred %p1, %p2, -1", "vote.sync.any.pred %p1, %p2, -1",
                             "vote.sync.uni.pred %p1, %p2, -1",
                             "vote.sync.ballot.b32 %r1, %p2, -1"),
                   ("vote.all.pred %p1, %p2", "vote.sync.any.b32 %r1, %p2, -1")),
    "nanosleep": Opcode("_nanosleep", ("nanosleep.u32 20",)),
    "tcgen05": Opcode("_tcgen05", ("tcgen05.fence::before_thread_sync",
                                   "tcgen05.fence::after_thread_sync"),
                      ("tcgen05.commit.cta_group::1.mbarrier::arrive::one.b64 [%rd1]",)),
    # -- control ----------------------------------------------------------------------
    "bra": Opcode(None, ("bra L", "@%p1 bra.uni L")),
    "ret": Opcode("_exit", ("ret",)),
    "exit": Opcode("_exit", ("exit",)),
    "call": Opcode("_call", ("call.uni (retval0), vprintf, (param0, param1)",)),
}

# Opcodes refused by name although Mosaic GPU kernels may contain them (the table
# walk checks that each is refused).
REFUSED = ("activemask.b32 %r1", "popc.b32 %r1, %r2", "ex2.approx.f32 %f1, %f2",
           "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
           "[%r1], [%rd1, {%r2, %r3}], [%r4]",
           "wgmma.fence.sync.aligned")
