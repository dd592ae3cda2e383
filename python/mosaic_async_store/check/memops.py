"""Loads and stores of the PTX checker: ``ld``, ``st`` (weak, strong, ``st.async``),
``red`` (strong, ``red.async``) and ``mapa``.  Each handler checks the opcode's
qualifiers and hands the access to the module that models it: ``access`` (weak
and atomic stores, race checks), ``asyncops`` (``st.async`` / ``red.async``),
``strong`` (strong loads and their reads-from); addresses resolve through
``addresses``.
"""

from __future__ import annotations

from mosaic_async_store.check import access, access_core, addresses, program, strong, warp_memory
from mosaic_async_store.check.findings import Finding, Stop, fault
from mosaic_async_store.check.memory import SCOPES
from mosaic_async_store.check.family import Family
from mosaic_async_store.check.opcodes import Opcode, check_qualifiers
from mosaic_async_store.check.ops import RED, RED_FORMS
from mosaic_async_store.check.strong import strong_semantics

__all__ = ["OPCODES", "FAMILY"]

# The qualifier grammar of each form (PTX ISA, ld / st / st.async / red / red.async /
# mapa), as far as the checker runs it: group -> the qualifiers it runs exactly.  Cache
# operators, eviction priorities and prefetch sizes are performance hints (they change
# neither values nor ordering) and run as such (``.nc``: ``_ld_nc``); ``.cv``, ``.lu``,
# ``.L2::cache_hint`` (its extra operand), ``.unified``, ``.v8`` and every other qualifier
# are refused by name (``opcodes.check_qualifiers``).  ``.b128`` runs in the weak scalar
# ``ld`` / ``st`` only (``_b128``: the value a Python int of 128 bits).
_TYPES = {"b8", "b16", "b32", "b64", "u8", "u16", "u32", "u64", "s8", "s16", "s32", "s64",
          "f32", "f64"}
_HINTS = {"L1 eviction priority": {"L1::evict_normal", "L1::evict_unchanged",
                                   "L1::evict_first", "L1::evict_last", "L1::no_allocate"},
          "L2 eviction priority": {"L2::evict_first", "L2::evict_last"}}
_VECTOR = {"vector": {"v2", "v4"}}
_LD = {"sem": {"weak", "relaxed", "acquire", "volatile", "mmio"}, "scope": set(SCOPES),
       "state space": {"global", "shared", "shared::cta", "shared::cluster", "local", "param",
                       "const"},
       "cache operator": {"ca", "cg", "cs"}, **_HINTS,
       "prefetch size": {"L2::64B", "L2::128B", "L2::256B"}, **_VECTOR,
       "type": _TYPES | {"b128"}}
_ST = {"sem": {"weak", "relaxed", "release", "volatile", "mmio"}, "scope": set(SCOPES),
       "state space": {"global", "shared", "shared::cta", "shared::cluster", "local", "param"},
       "cache operator": {"wb", "cg", "cs", "wt"}, **_HINTS, **_VECTOR,
       "type": _TYPES | {"b128"}}
_ASYNC = {"async": {"async"}, "state space": {"shared::cluster"},
          "completion mechanism": {"mbarrier::complete_tx::bytes"}}
_ST_ASYNC = {**_ASYNC, "sem": {"weak"}, "scope": {"cluster"}, **_VECTOR,
             "type": {"b32", "b64", "u32", "u64", "s32", "s64", "f32", "f64"}}
_RED_TYPES = {t for _, t in RED_FORMS}
_RED = {"sem": {"relaxed", "release"}, "scope": set(SCOPES),
        "state space": {"global", "shared", "shared::cta", "shared::cluster"},
        "operation": set(RED), "noftz": {"noftz"}, "type": _RED_TYPES}
_RED_ASYNC = {**_ASYNC, "sem": {"relaxed"}, "scope": {"cluster"}, "operation": set(RED),
              "type": _RED_TYPES}
# red.async's (operation, type) pairs (PTX ISA, red.async: .inc/.dec .u32; .min/.max
# .u32/.s32; .and/.or/.xor .b32; .add .u32/.s32/.u64): no float form, no 64-bit min/max.
_RED_ASYNC_FORMS = {("inc", "u32"), ("dec", "u32"), ("min", "u32"), ("min", "s32"),
                    ("max", "u32"), ("max", "s32"), ("and", "b32"), ("or", "b32"),
                    ("xor", "b32"), ("add", "u32"), ("add", "s32"), ("add", "u64")}
_MAPA = {"state space": {"shared::cluster"}, "type": {"u32", "u64"}}


def _check_form(ins, groups, form, operands):
  """The qualifiers (``opcodes.check_qualifiers``), the operand count and, with a
  vector qualifier, the vector operand's length; anything else is refused by name."""
  seen = check_qualifiers(ins, groups, form)
  if len(ins.ops) != operands:
    raise NotImplementedError(f"opcode {ins.opcode} ({len(ins.ops)} operands: {form} takes "
                              f"{operands})")
  data = ins.ops[0] if ins.base == "ld" else ins.ops[1] if ins.base in ("st", "red") else None
  lanes = int(seen["vector"][1:]) if "vector" in seen else None
  if data is not None and (data[0] == "vec") != (lanes is not None) or \
     (lanes is not None and len(data[1]) != lanes):
    raise NotImplementedError(f"opcode {ins.opcode} (the vector operand does not have the "
                              f"{lanes or 'one'} element(s) its qualifiers name)")
  return seen


def _mapa(k, ins):
  """``mapa{.shared::cluster}.type d, a, rank``: ``a`` in CTA ``rank``'s window."""
  _check_form(ins, _MAPA, "mapa", 3)
  put, a, rank = program.setter(k, ins.ops[0], ins.bits), ins.src[1], ins.src[2]
  def mapa(th):
    addr, r = a(th), rank(th)
    if addr >> 24 or not 0 <= r < len(k.smem):
      raise fault(f"mapa of {addr:#x} to rank {r}")
    put(th, (r + 1) << 24 | addr)
  return mapa


def _ld(k, ins):
  """ld (vector forms too); generic when it names no state space; strong loads
  (strong.py); ``ld.global.nc`` (``_ld_nc``).  Signed loads narrower than 32 bits
  (sign extension) and the const space are refused."""
  if "nc" in ins.mods:
    return _ld_nc(k, ins)
  seen = _check_form(ins, _LD, "ld", 2)
  if seen.get("type") == "b128":
    return _b128(k, ins, seen)
  strong_form = strong_semantics(ins)
  if strong_form is not None and ins.space != "const":
    return strong._strong_ld(k, ins, *strong_form)
  if ins.space == "const" or (ins.t[0] == "s" and ins.bits < 32):
    raise NotImplementedError(f"opcode {ins.opcode}")
  dests = ins.ops[0][1] if ins.ops[0][0] == "vec" else [ins.ops[0]]
  puts, addr, size, space = [program.setter(k, o, ins.bits) for o in dests], ins.src[1], \
      ins.bits // 8, ins.space
  insn = len(k.program.code)   # this instruction's index (it is being compiled)
  mem, n = addresses.mem_fn(k, space, size * len(puts)), size * len(puts)
  if len(dests) == 1 and dests[0][0] == "reg":   # the common case, inlined
    mask, put = (1 << ins.bits) - 1, puts[0]
    glob, smem = space == "global", space not in addresses.NOT_SHARED   # (no shadow)
    def load1(th):
      buf, off = mem(th, addr(th))
      if glob:   # (_global_access, inline)
        bad = k.gshadow.access(th, buf, off, n, False, False, insn, None)
        if bad is not None:
          access_core.global_race(k, th, buf, off, n, False, bad, None, insn)
      elif smem:
        access_core.thread_access(k, th, buf, off, n, write=False, insn=insn)
      put(th, int.from_bytes(buf[off:off + n], "little"))
    if glob:
      load1.lanes = warp_memory.global_load(k, addr, n, put, mask, insn)
    elif space in warp_memory.SHARED:
      load1.lanes = warp_memory.shared_load(k, addr, n, put, mask, insn)
    return load1
  def load(th):
    buf, off = mem(th, addr(th))
    access_core.thread_access(k, th, buf, off, n, write=False, insn=insn)
    for i, p in enumerate(puts):
      p(th, int.from_bytes(buf[off + i * size:off + (i + 1) * size], "little"))
  if space in warp_memory.SHARED and all(d[0] == "reg" for d in dests):   # (.v2 / .v4)
    load.lanes = warp_memory.shared_load_vector(k, addr, size, puts, insn)
  return load


# ld.global.nc's grammar on sm_90a (PTX ISA, ld.global.nc): no .L2::evict_* and no .v8
# (sm_100), no .L2::cache_hint or .b128 (as ld), no signed type below 32 bits (as ld).
_LD_NC = {"state space": {"global"}, "cache operator": {"ca", "cg", "cs"}, "nc": {"nc"},
          "L1 eviction priority": _HINTS["L1 eviction priority"],
          "prefetch size": {"L2::64B", "L2::128B", "L2::256B"}, **_VECTOR,
          "type": _TYPES - {"s8", "s16"}}


def _ld_nc(k, ins):
  """``ld.global.nc``: a load through the "non-coherent read-only cache" (PTX ISA,
  ld.global.nc), so its bytes must be read-only for the whole kernel (CUDA Programming
  Guide, read-only data cache): any write of the launch to a byte a thread reads with
  it, before (``global_memory.GlobalShadow.nc_read``) or after (``GlobalShadow.access``),
  is ``nc-written``; else it loads as ld.global (checked for races as any read).
  Forms (sm_90a): ``.ca``/``.cg``/``.cs`` or (the ISA's other syntax, not both) L1
  eviction priorities, prefetch sizes, ``.v2``/``.v4``; the L2 eviction priorities and
  ``.v8`` (sm_100), ``.L2::cache_hint``, ``.b128`` and signed types narrower than 32
  bits are refused by name."""
  seen = check_qualifiers(ins, _LD_NC, "ld.global.nc")
  lanes = int(seen["vector"][1:]) if "vector" in seen else None
  dest = ins.ops[0] if ins.ops else None
  if len(ins.ops) != 2 or "state space" not in seen or \
     {"cache operator", "L1 eviction priority"} <= seen.keys() or ins.ops[1][0] != "addr" or \
     (dest[0] == "vec") != (lanes is not None) or \
     (lanes is not None and len(dest[1]) != lanes) or \
     (lanes is None and dest[0] != "reg"):
    raise NotImplementedError(f"opcode {ins.opcode} (operands or qualifiers: not a form of "
                              "ld.global.nc the checker runs)")
  dests = dest[1] if dest[0] == "vec" else [dest]
  if any(d[0] != "reg" for d in dests):
    raise NotImplementedError(f"opcode {ins.opcode} (a sink in its vector: sm_100 forms)")
  size = ins.bits // 8
  puts, addr, n = [program.setter(k, d, ins.bits) for d in dests], ins.src[1], size * len(dests)
  insn = len(k.program.code)   # this instruction's index (it is being compiled)
  mem, line = addresses.mem_fn(k, "global", n), k.program.lines[-1]

  def load(th):
    buf, off = mem(th, addr(th))
    written = k.gshadow.nc_read(th, buf, off, n, line)
    if written is not None:
      slot, at = written
      by = k.threads[slot - 1]
      raise Stop(Finding("nc-written", f"CTA {th.cta} thread {th.tid} reads "
                          f"{k.gshadow.describe(buf, off, n)} with ld.global.nc, which CTA "
                          f"{by.cta} thread {by.tid} wrote in this kernel (`"
                          f"{k.program.texts[at]}`, PTX line {k.program.lines[at]}): data "
                          "read through the non-coherent cache must be read-only for the "
                          "whole kernel"))
    access_core.global_access(k, th, buf, off, n, write=False, insn=insn)
    for i, put in enumerate(puts):
      put(th, int.from_bytes(buf[off + i * size:off + (i + 1) * size], "little"))
  return load


def _b128(k, ins, seen):
  """A weak scalar ``ld`` / ``st`` of ``.b128`` (PTX ISA, ld / st: ``.type`` includes
  ``.b128``; "ld.global.b128 %r0, [gbl]; // 128-bit load"): 16 naturally aligned bytes
  (``addresses.mem`` faults on a misaligned address) as one little-endian Python int of
  128 bits, checked for races as any weak access of those bytes.  The register holds
  the int; a ``.b128`` register is a name like any other (``program._declare``).  Run
  lane by lane (no warp form: the warp forms of ``warp_memory`` take 1- to 8-byte
  elements).  Refused by name: a vector of ``.b128``, a strong or volatile (``.relaxed`` /
  ``.acquire`` / ``.release`` / ``.volatile`` / ``.mmio``) one and the const and param
  spaces (no kernel the checker runs has them; their rules are not modelled)."""
  if "vector" in seen or seen.get("sem", "weak") != "weak" or ins.space in ("const", "param"):
    raise NotImplementedError(f"opcode {ins.opcode} (.b128: the checker runs the weak "
                              f"scalar {ins.base}.b128 only)")
  load, insn, space = ins.base == "ld", len(k.program.code), ins.space
  data = ins.ops[0] if load else ins.ops[1]
  if data[0] not in ("reg", "imm") or (load and data[0] != "reg"):
    raise NotImplementedError(f"opcode {ins.opcode} (operand {data}: .b128 data is a "
                              "register)")
  mem, addr = addresses.mem_fn(k, space, 16), ins.src[1 if load else 0]
  if load:
    put = program.setter(k, data, 128)
    def load128(th):
      buf, off = mem(th, addr(th))
      access_core.thread_access(k, th, buf, off, 16, write=False, insn=insn)
      put(th, int.from_bytes(buf[off:off + 16], "little"))
    return load128
  value, mask, traced = ins.src[1], (1 << 128) - 1, "::" in (space or "")
  def store128(th):
    buf, off = mem(th, addr(th))
    if traced and k.store_trace is not None:   # (as access.store_fn)
      access_core.trace(k, th, buf, off, 16)
    access_core.thread_access(k, th, buf, off, 16, write=True, insn=insn)
    access_core.write_values(k, buf, off, 16, [value(th) & mask], None, weak=True)
  return store128


def _st(k, ins):
  """st (weak, or strong: strong.py), st.param (an argument of a call: the callee
  is not run), and st.async with complete_tx."""
  mods, src, size = ins.mods, ins.src, ins.bits // 8
  seen = _check_form(ins, _ST_ASYNC, "st.async", 3) if "async" in mods else \
      _check_form(ins, _ST, "st", 2)
  if seen.get("type") == "b128":
    return _b128(k, ins, seen)
  if ins.space == "param":
    return lambda th: None
  if ins.space != "const" and "async" not in mods:
    return access.store_fn(k, ins.space, src[0], ins.vals, size, None, strong_semantics(ins))
  if mods[0] == "async" and "mbarrier::complete_tx::bytes" in mods:
    return access.async_store_fn(k, src[0], ins.vals, size, None, src[2])
  raise NotImplementedError(f"opcode {ins.opcode}")


def _red(k, ins):
  """red (strong: .relaxed or .release, into a named state space) and red.async;
  the float forms only for add."""
  mods, t, size = ins.mods, ins.t, ins.bits // 8
  if "async" in mods:
    _check_form(ins, _RED_ASYNC, "red.async", 3)
  else:
    _check_form(ins, _RED, "red", 2)
  op = next((p for p in mods if p in RED), None)
  floats = t[0] == "f" or t[:2] == "bf"
  if not ins.space or (op, t) not in RED_FORMS or ("noftz" in mods) != (floats and t != "f32") \
     or ("async" in mods and (op, t) not in _RED_ASYNC_FORMS):
    raise NotImplementedError(f"opcode {ins.opcode}")
  if "async" in mods:
    return access.async_store_fn(k, ins.src[0], ins.vals, size, (op, t), ins.src[2])
  return access.store_fn(k, ins.space, ins.src[0], ins.vals, size, (op, t), strong_semantics(ins))


# The opcodes this family runs (``opcodes.Opcode``: the handler, statements it runs,
# statements it refuses; test/checker/test_opcode_table.py compiles every one).
OPCODES = {
    "ld": Opcode(_ld, ("ld.global.u32 %r1, [%rd2]", "ld.shared.v2.u32 {%r1, %r2}, [%r3+8]",
                       "ld.param.u64 %rd1, [%rd2]", "ld.u8 %h1, [%rd2]",
                       "ld.weak.shared.u32 %r1, [%r2]",
                       "ld.acquire.cluster.shared.u32 %r1, [%r2]",
                       "ld.relaxed.cta.shared::cluster.u32 %r1, [%r2]",
                       "ld.volatile.global.u64 %rd1, [%rd2]", "ld.global.ca.u32 %r1, [%rd2]",
                       "ld.global.L1::evict_last.L2::256B.u32 %r1, [%rd2]",
                       "ld.global.nc.u32 %r1, [%rd2]", "ld.shared.b128 %q1, [%r2]",
                       "ld.global.b128 %q1, [%rd2+16]", "ld.global.cg.nc.v4.f32 {%f1, %f2, %f3, "
                       "%f4}, [%rd2+16]", "ld.global.nc.L1::no_allocate.L2::256B.v2.u64 "
                       "{%rd1, %rd3}, [%rd2]"),
                 ("ld.const.u32 %r1, [%rd2]", "ld.global.s8 %h1, [%rd2]",
                  "ld.acquire.shared.u32 %r1, [%r2]", "ld.release.cta.shared.u32 %r1, [%r2]",
                  "ld.relaxed.cta.shared.v2.u32 {%r1, %r2}, [%r3]",
                  "ld.mmio.relaxed.sys.global.u32 %r1, [%rd2]", "ld.nc.u32 %r1, [%rd2]",
                  "ld.global.nc.L2::evict_first.u32 %r1, [%rd2]",
                  "ld.global.nc.v8.u32 {%r1, %r2, %r3, %r4, %r5, %r6, %r7, %r8}, [%rd2]",
                  "ld.global.nc.L2::cache_hint.u32 %r1, [%rd2], %rd3",
                  "ld.relaxed.gpu.global.nc.u32 %r1, [%rd2]", "ld.global.nc.s8 %h1, [%rd2]",
                  "ld.global.cg.nc.L1::evict_last.u32 %r1, [%rd2]",
                "ld.global.cv.u32 %r1, [%rd2]", "ld.local.lu.u32 %r1, [%rd2]",
                "ld.global.L2::cache_hint.u32 %r1, [%rd2], %rd3", "ld.global.foo.u32 %r1, [%rd2]",
                "ld.shared.v2.v2.u32 {%r1, %r2}, [%r3]", "ld.global.u32.u32 %r1, [%rd2]",
                "ld.global.v4.u32 {%r1, %r2}, [%rd2]", "ld.relaxed.cta.shared.b128 %q1, [%r2]",
                "ld.shared.v2.b128 {%q1, %q2}, [%r2]", "ld.global.nc.b128 %q1, [%rd2]",
                "ld.global.u32 %r1, [%rd2], %rd3")),
    "st": Opcode(_st, ("st.global.u32 [%rd1], %r2", "st.shared.v4.b32 [%r1], {%r2, %r3, %r4, %r5}",
                       "st.shared::cluster.u32 [%r1], %r2",
                       "st.release.cluster.shared::cluster.u32 [%r1], %r2",
                       "st.relaxed.gpu.global.b64 [%rd1], %rd2", "st.volatile.shared.u32 [%r1], %r2",
                       "st.shared.b128 [%r1], %q2", "st.global.b128 [%rd1], %q2",
                       "st.async.shared::cluster.mbarrier::complete_tx::bytes.u32 [%r1], %r2, [%r3]",
                       "st.async.cluster.shared::cluster.mbarrier::complete_tx::bytes.b64 [%r1], %rd2, [%r3]"),
                 ("st.async.shared::cluster.u32 [%r1], %r2", "st.acquire.cta.shared.u32 [%r1], %r2",
                  "st.release.shared.u32 [%r1], %r2", "st.release.cta.shared.b128 [%r1], %q2",
                  "st.shared.v2.b128 [%r1], {%q1, %q2}",
                  "st.release.cta.shared.v2.u32 [%r1], {%r2, %r3}", "st.global.bar.u32 [%rd1], %r2",
                "st.shared.v8.b32 [%r1], {%r2, %r3, %r4, %r5, %r6, %r7, %r8, %r9}",
                "st.global.wt.wb.u32 [%rd1], %r2",
                "st.async.release.cluster.shared::cluster.mbarrier::complete_tx::bytes.u32 "
                "[%r1], %r2, [%r3]",
                "st.async.shared::cluster.mbarrier::complete_tx::bytes.u16 [%r1], %h2, [%r3]")),
    "red": Opcode(_red, ("red.shared::cluster.add.u32 [%r1], %r2",
                         "red.relaxed.cluster.shared::cluster.add.u32 [%r1], %r2",
                         "red.release.cluster.shared::cluster.add.u32 [%r1], %r2",
                         "red.shared::cluster.add.noftz.bf16x2 [%r1], %r2",
                         "red.shared::cta.add.f32 [%r1], %r2",
                         "red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes.add.u32 [%r1], %r2, [%r3]"),
                  ("red.acquire.cluster.shared::cluster.add.u32 [%r1], %r2",
                   "red.global.add.f64 [%rd1], %rd2", "red.shared.add.f16x2 [%r1], %r2",
                   "red.shared.add.noftz.f32 [%r1], %r2", "red.shared::cluster.add.foo.u32 [%r1], %r2",
                "red.global.add.L2::cache_hint.u32 [%rd1], %r2, %rd3",
                "red.async.release.cluster.shared::cluster.mbarrier::complete_tx::bytes.add.u32 "
                "[%r1], %r2, [%r3]",
                "red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes.add.f32 "
                "[%r1], %f2, [%r3]")),
    "mapa": Opcode(_mapa, ("mapa.shared::cluster.u32 %r1, %r2, %r3",
                           "mapa.shared::cluster.u64 %rd1, %rd2, 1", "mapa.u32 %r1, %r2, %r3"),
                  ("mapa.shared::cluster.foo.u32 %r1, %r2, %r3",)),
}

FAMILY = Family("memops", OPCODES)
