"""Loads and stores of the PTX checker: ``ld``, ``st`` (weak, strong, ``st.async``),
``red`` (strong, ``red.async``) and ``mapa``.  Each handler checks the opcode's
qualifiers and hands the access to the module that models it: ``access`` (weak
and atomic stores, race checks), ``asyncops`` (``st.async`` / ``red.async``),
``strong`` (strong loads and their reads-from); addresses resolve through
``addresses``.
"""

from __future__ import annotations

from mosaic_async_store.check import access, addresses, program, strong
from mosaic_async_store.check.opcodes import Opcode
from mosaic_async_store.check.ops import RED, RED_FORMS
from mosaic_async_store.check.strong import strong_semantics

__all__ = ["OPCODES"]

_NOT_SHARED = addresses.NOT_SHARED


def _mapa(k, ins):
  put, a, rank = program.setter(ins.ops[0], ins.bits), ins.src[1], ins.src[2]
  def mapa(th):
    addr, r = a(th), rank(th)
    if addr >> 24 or not 0 <= r < len(k.smem):
      raise RuntimeError(f"mapa of {addr:#x} to rank {r}")
    put(th, (r + 1) << 24 | addr)
  return mapa


def _ld(k, ins):
  """ld (vector forms too); generic when it names no state space; strong loads
  (strong.py).  Signed loads narrower than 32 bits (sign extension) and the const
  space are refused."""
  strong_form = strong_semantics(ins)
  if strong_form is not None and ins.space != "const":
    return strong._strong_ld(k, ins, *strong_form)
  if ins.space == "const" or (ins.t[0] == "s" and ins.bits < 32):
    raise NotImplementedError(f"opcode {ins.opcode}")
  dests = ins.ops[0][1] if ins.ops[0][0] == "vec" else [ins.ops[0]]
  puts, addr, size, space = [program.setter(o, ins.bits) for o in dests], ins.src[1], \
      ins.bits // 8, ins.space
  insn = len(k.program.code)   # this instruction's index (it is being compiled)
  mem, n = addresses.mem_fn(k, space, size * len(puts)), size * len(puts)
  if len(dests) == 1 and dests[0][0] == "reg":   # the common case, inlined
    reg, mask = dests[0][1], (1 << ins.bits) - 1
    glob, smem = space == "global", space not in _NOT_SHARED   # (local, param: no shadow)
    def load1(th):
      buf, off = mem(th, addr(th))
      if glob:   # (_global_access, inline)
        bad = k.gshadow.access(th, buf, off, n, False, False, insn, None)
        if bad is not None:
          access._global_race(k, th, buf, off, n, False, bad, None)
      elif smem:
        access._access(k, th, buf, off, n, write=False, insn=insn)
      th.regs[reg] = int.from_bytes(buf[off:off + n], "little") & mask
    return load1
  def load(th):
    buf, off = mem(th, addr(th))
    access._access(k, th, buf, off, n, write=False, insn=insn)
    for i, p in enumerate(puts):
      p(th, int.from_bytes(buf[off + i * size:off + (i + 1) * size], "little"))
  return load


def _st(k, ins):
  """st (weak, or strong: strong.py), st.param (an argument of a call: the callee
  is not run), and st.async with complete_tx."""
  mods, src, size = ins.mods, ins.src, ins.bits // 8
  if ins.space == "param":
    return lambda th: None
  if ins.space != "const" and "async" not in mods:
    return access._store_fn(k, ins.space, src[0], ins.vals, size, None, strong_semantics(ins))
  if mods[0] == "async" and "mbarrier::complete_tx::bytes" in mods:
    return access._async_fn(k, src[0], ins.vals, size, None, src[2])
  raise NotImplementedError(f"opcode {ins.opcode}")


def _red(k, ins):
  """red (strong: .relaxed or .release, into a named state space) and red.async;
  the float forms only for add."""
  mods, t, size = ins.mods, ins.t, ins.bits // 8
  op = next((p for p in mods if p in RED), None)
  floats = t[0] == "f" or t[:2] == "bf"
  if not ins.space or (op, t) not in RED_FORMS or ("noftz" in mods) != (floats and t != "f32"):
    raise NotImplementedError(f"opcode {ins.opcode}")
  if "async" in mods:
    return access._async_fn(k, ins.src[0], ins.vals, size, (op, t), ins.src[2])
  return access._store_fn(k, ins.space, ins.src[0], ins.vals, size, (op, t), strong_semantics(ins))


# The opcodes this family runs (``opcodes.Opcode``: the handler, statements it runs,
# statements it refuses; test/emu/test_opcode_table.py compiles every one).
OPCODES = {
    "ld": Opcode(_ld, ("ld.global.u32 %r1, [%rd2]", "ld.shared.v2.u32 {%r1, %r2}, [%r3+8]",
                       "ld.param.u64 %rd1, [%rd2]", "ld.u8 %h1, [%rd2]",
                       "ld.weak.shared.u32 %r1, [%r2]",
                       "ld.acquire.cluster.shared.u32 %r1, [%r2]",
                       "ld.relaxed.cta.shared::cluster.u32 %r1, [%r2]",
                       "ld.volatile.global.u64 %rd1, [%rd2]"),
                 ("ld.const.u32 %r1, [%rd2]", "ld.global.s8 %h1, [%rd2]",
                  "ld.acquire.shared.u32 %r1, [%r2]", "ld.release.cta.shared.u32 %r1, [%r2]",
                  "ld.relaxed.cta.shared.v2.u32 {%r1, %r2}, [%r3]",
                  "ld.mmio.relaxed.sys.global.u32 %r1, [%rd2]")),
    "st": Opcode(_st, ("st.global.u32 [%rd1], %r2", "st.shared.v4.b32 [%r1], {%r2, %r3, %r4, %r5}",
                       "st.shared::cluster.u32 [%r1], %r2",
                       "st.release.cluster.shared::cluster.u32 [%r1], %r2",
                       "st.relaxed.gpu.global.b64 [%rd1], %rd2", "st.volatile.shared.u32 [%r1], %r2",
                       "st.async.shared::cluster.mbarrier::complete_tx::bytes.u32 [%r1], %r2, [%r3]"),
                 ("st.async.shared::cluster.u32 [%r1], %r2", "st.acquire.cta.shared.u32 [%r1], %r2",
                  "st.release.shared.u32 [%r1], %r2",
                  "st.release.cta.shared.v2.u32 [%r1], {%r2, %r3}")),
    "red": Opcode(_red, ("red.shared::cluster.add.u32 [%r1], %r2",
                         "red.relaxed.cluster.shared::cluster.add.u32 [%r1], %r2",
                         "red.release.cluster.shared::cluster.add.u32 [%r1], %r2",
                         "red.shared::cluster.add.noftz.bf16x2 [%r1], %r2",
                         "red.shared::cta.add.f32 [%r1], %r2",
                         "red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes.add.u32 [%r1], %r2, [%r3]"),
                  ("red.acquire.cluster.shared::cluster.add.u32 [%r1], %r2",
                   "red.global.add.f64 [%rd1], %rd2", "red.shared.add.f16x2 [%r1], %r2",
                   "red.shared.add.noftz.f32 [%r1], %r2")),
    "mapa": Opcode(_mapa, ("mapa.shared::cluster.u32 %r1, %r2, %r3",
                           "mapa.shared::cluster.u64 %rd1, %rd2, 1")),
}
