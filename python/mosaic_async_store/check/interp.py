"""A small PTX interpreter and protocol checker: runs one cluster on the CPU.

Scope: the PTX subset of the project's full (non-bare) store kernels and of the
Pallas runtime kernels on sm_90a: integer ALU, predicates, global/shared/local
loads and stores (also generic ones, without a state space), ``mapa``,
``st.async`` / ``red.async`` with ``complete_tx``, plain ``st`` / ``red`` into
``.shared::cluster``, mbarriers, ``shfl.sync``, ``elect.sync`` and CTA / cluster
barriers, with the float arithmetic of ``floats``.  The opcode table
(``opcodes.OPCODES``) says which method compiles each base opcode; any other
opcode, or a qualifier a handler does not implement, raises NotImplementedError
(naming it) when the kernel is parsed: nothing is skipped silently.

Model:
  * each thread of each CTA is interpreted on its own and runs until it reaches
    a synchronising instruction (warp collective, ``bar.sync``,
    ``barrier.cluster.wait``, an unfinished ``mbarrier.try_wait``), or, under a
    seeded schedule, pauses after an arrive or an asynchronous store; the
    scheduler picks the next thread and releases the participants once a
    synchronisation can complete;
  * asynchronous stores (``st.async`` / ``red.async``) and their complete_tx
    land when the schedule says, in any order (``memory.Schedule``);
    memory ordering is checked by vector clocks with scopes, per byte of
    shared and global memory (``memory``, ``global_memory``), and every violated
    rule raises ``ProtocolError``;
  * ``mbarrier.test_wait`` / ``try_wait`` may return false, and the checker lets
    them (sync.py, ``_wait``): the first try of a wait the thread could have run
    before the phase completed returns false; ``try_wait`` retried on an
    unfinished phase blocks, and returns false (the hardware time limit
    expiring) only when no thread can make progress any more;
  * addresses: a CTA's shared window starts at SHARED_BASE; ``mapa`` puts
    (rank + 1) << 24 into a ``.shared::cluster`` address, so an unmapped
    (shared::cta) address used as a cluster address means "own CTA", as on
    hardware; global buffer i lives at (i + 1) << 40, local memory at
    LOCAL_BASE; a generic address (``ld``/``st`` without a state space) is
    resolved by this map at run time and then takes the path of its space;
    accesses are checked for bounds and natural alignment;
  * parameters: a NumPy argument is one pointer; ``Memref(array)`` is a memref
    descriptor (Mosaic's kernels), 3 + 2 * ndim parameters (``_pack_params``).
"""

from __future__ import annotations

import re

import numpy as np

from mosaic_async_store.check import warp
from mosaic_async_store.check import lineinfo
from mosaic_async_store.check.memory import ProtocolError
from mosaic_async_store.check.access import _NOT_SHARED, AccessSemantics
from mosaic_async_store.check.barriers import BarrierSemantics
from mosaic_async_store.check.global_memory import GlobalShadow
from mosaic_async_store.check.opcodes import OPCODES, decode
from mosaic_async_store.check.run import EXIT, Runner
from mosaic_async_store.check.sync import YIELD, SyncSemantics
from mosaic_async_store.check.ops import (RED, RED_FORMS, UNDEFINED, immediate,
                                          split_operands)
from mosaic_async_store.check.strong import StrongSemantics, strong_semantics
from mosaic_async_store.check.values import ValueSemantics

# Handlers that are functions of a family module (the opcode table names them
# "module.function"), not methods of PtxKernel.
_FAMILIES = {"warp.shfl": warp.shfl, "warp.vote": warp.vote, "warp.elect": warp.elect}

SHARED_BASE = 0x400            # sm_90 reserves the first 1 KiB of the shared window
LOCAL_BASE, GLOBAL_SHIFT = 0x100000, 40
_GLOBAL_MASK = (1 << GLOBAL_SHIFT) - 1


def _is_register(tok, scopes):
  """``%name``, or a bare name (``P1``) that a ``.reg`` of an enclosing scope declares."""
  return tok.startswith("%") or any(tok in sc[1] for sc in scopes)


class Memref:
  """A launch argument passed as a memref descriptor, as Mosaic kernels take their
  buffers: allocated pointer, aligned pointer, offset 0, sizes, row-major strides in
  elements (3 + 2 * ndim 8-byte parameters).  A bare NumPy array is one pointer."""

  def __init__(self, array):
    self.array = np.asarray(array)


def _guarded(fn, guard):
  """``@%p`` / ``@!%p``: the instruction does nothing unless the predicate matches."""
  if guard is None:
    return fn
  pname, want = guard
  return lambda th: fn(th) if th.regs[pname] == want else None


class PtxKernel(Runner, SyncSemantics, BarrierSemantics, AccessSemantics, StrongSemantics,
                ValueSemantics):
  """``PtxKernel(ptx_text).launch(buffers, cluster=..., smem_bytes=...)``."""

  def __init__(self, text: str):
    self.files = lineinfo.file_table(text)   # .loc's file ids (lineinfo.py)
    text = re.sub(r"//[^\n]*", "", text)
    m = re.search(r"\.entry\s+\w+\s*\((.*?)\)", text, re.S)
    self.params = re.findall(r"(\w+)\s*(?:,|$)", m.group(1).strip())
    self.symbols = {p: ("param", 8 * i) for i, p in enumerate(self.params)}
    for name in re.findall(r"\.global\s[^;]*?(\w+)\[\d+\]", text[:m.start()]):
      self.symbols[name] = ("global", 0)   # printf formats: never read (address unmapped)
    self.code, self.texts, self.labels, self.local_bytes = [], [], {}, 0
    self.lines = []           # the PTX source line of each instruction (1-based)
    self.sources = []         # its "file:line" from the last .loc before it, or None
    self._loc = None
    self.store_trace = None   # launch(trace_stores=True) fills it
    start = text.index("{", m.end())
    self._first_line = text.count("\n", 0, start) + 1
    self._parse(text[start:])

  # -- parsing -----------------------------------------------------------------

  def _parse(self, body):
    """Splits the body into statements, tracking ``{}`` scopes: registers and
    labels declared in an inner (inline asm) block shadow the outer ones.  Stops
    at the body's end (debug sections may follow); ``.loc`` / ``.file`` lines (no
    ``;``) give the next instructions their source."""
    scopes, nblock, fixups, i = [], 0, [], 0  # scope: (id, {reg: renamed}, {label: pc})
    while i < len(body):
      if body[i].isspace():
        i += 1
      elif body[i] == "}" and len(scopes) == 1:   # the kernel's end
        break
      elif body[i] in "{}":
        nblock += 1
        scopes = scopes + [(nblock, {}, {})] if body[i] == "{" else scopes[:-1]
        i += 1
      elif directive := lineinfo.DIRECTIVE.match(body, i):
        if directive.group(1):   # a .loc (a .file: read in __init__)
          self._loc = lineinfo.source(self.files, *directive.group(1, 2))
        i = directive.end()
      elif lab := re.match(r"([$\w]+):", body[i:i + 100]):
        (scopes[-1][2] if len(scopes) > 1 else self.labels)[lab.group(1)] = len(self.code)
        i += lab.end()
      else:
        j = body.index(";", i)
        stmt, i = " ".join(body[i:j].split()), j + 1
        if stmt.startswith("."):
          self._declare(stmt, scopes)
        elif stmt:
          line = self._first_line + body.count("\n", 0, j)
          self.texts.append(stmt)
          self.lines.append(line)
          self.sources.append(self._loc)
          try:
            self.code.append(self._compile(stmt, scopes, fixups))
          except NotImplementedError as e:   # say where
            raise NotImplementedError(f"PTX line {line}: `{stmt}`: {e}") from None
    for k, label, chain, guard in fixups:  # branches, once every label is known
      target = next((sc[2][label] for sc in reversed(chain) if label in sc[2]),
                    None)
      target = self.labels[label] if target is None else target
      self.code[k] = _guarded(lambda th, t=target: t, guard)

  def source_at(self, ptx_line):
    """The source of the (first) instruction at PTX line ``ptx_line``, or None."""
    k = next((k for k, line in enumerate(self.lines) if line == ptx_line), None)
    return None if k is None else self.sources[k]

  def _declare(self, stmt, scopes):
    kind, words = stmt.split()[0], stmt.split()
    if kind == ".reg":  # an inner block's registers are renamed; bare names (``P1``,
      inner = len(scopes) > 1   # upstream's inline asm) are recorded for _operand
      for decl in split_operands(" ".join(words[2:])):
        m = re.fullmatch(r"(%?\w+)<(\d+)>", decl)
        for n in [m.group(1) + str(k) for k in range(int(m.group(2)))] if m else [decl]:
          if inner or not n.startswith("%"):
            scopes[-1][1][n] = f"{n}@{scopes[-1][0]}" if inner else n
    elif kind == ".local":  # the stack depot (used by the printf report)
      m = re.search(r"(\w+)\[(\d+)\]", stmt)
      self.symbols[m.group(1)] = ("local", self.local_bytes)
      self.local_bytes += int(m.group(2))
    elif kind == ".shared" and "[" not in stmt:   # the dynamic SMEM
      self.symbols[words[-1]] = ("shared", 0)
    elif kind == ".param":  # argument of a call sequence (the callee is not run)
      self.symbols[words[-1]] = ("param", 0)
    else:
      raise NotImplementedError(f"directive: {stmt}")

  def _operand(self, tok, scopes):
    """-> (reg, name) | (imm, v) | (sym, name) | (vec, [ops]) | (addr, op, off) |
    (pair, op, op) | (sink,)"""
    if tok == "_":
      return ("sink",)
    if tok.startswith("{"):
      return ("vec", [self._operand(t, scopes) for t in split_operands(tok[1:-1])])
    if tok.startswith("["):
      m = re.fullmatch(r"\[\s*([^+\]]+?)\s*(?:\+\s*(-?\w+))?\s*\]", tok)
      return ("addr", self._operand(m.group(1), scopes), immediate(m.group(2) or "0"))
    if "|" in tok:
      return ("pair", *(self._operand(t, scopes) for t in tok.split("|")))
    if _is_register(tok, scopes):  # special registers (%tid.x, ...) are preset ones
      return ("reg", next((sc[1][tok] for sc in reversed(scopes) if tok in sc[1]), tok))
    if tok in self.symbols:
      return ("sym", tok)
    try:
      return ("imm", immediate(tok))
    except ValueError:   # a negated predicate (!%p), an expression, ...: not modelled
      raise NotImplementedError(f"operand {tok!r}") from None

  def _get(self, op):
    """A getter th -> int for a source operand."""
    if op[0] == "reg":  # a never-written register (LLVM's undef) reads as garbage:
      return lambda th, n=op[1]: th.regs.get(n, UNDEFINED)  # bytes built from it show
    if op[0] in ("imm", "sym"):
      v = op[1]
      if op[0] == "sym":
        kind, off = self.symbols[v]
        v = off + {"local": LOCAL_BASE, "shared": SHARED_BASE}.get(kind, 0)
      return lambda th: v
    if op[0] == "addr":
      if op[1][0] == "reg":   # one call per address, not two (a hot path)
        return lambda th, n=op[1][1], off=op[2]: th.regs.get(n, UNDEFINED) + off
      base, off = self._get(op[1]), op[2]
      return lambda th: base(th) + off
    raise NotImplementedError(f"source operand {op}")

  @staticmethod
  def _set(op, bits):
    """A setter (th, value) for a destination register (``_`` discards)."""
    if op[0] == "sink":
      return lambda th, v: None
    def put(th, v, n=op[1], mask=(1 << bits) - 1):
      th.regs[n] = v & mask
    return put

  def _compile(self, stmt, scopes, fixups):
    guard = re.match(r"@(!?)(%?\w+)\s+", stmt)
    if guard:
      stmt, pred = stmt[guard.end():], guard.group(2)
      if not _is_register(pred, scopes):
        raise NotImplementedError(f"guard @{pred}: not a declared register")
      guard = (self._operand(pred, scopes)[1], 0 if guard.group(1) else 1)
    opcode, _, rest = stmt.partition(" ")
    if opcode in ("bra", "bra.uni"):
      fixups.append((len(self.code), rest.strip(), list(scopes), guard))
      return None
    ops = [] if opcode.startswith("call") else [self._operand(t, scopes) for t in split_operands(rest)]
    return _guarded(self._semantics(opcode, ops), guard)

  # -- instruction semantics ----------------------------------------------------

  def _semantics(self, opcode, ops):
    """The function th -> None (next), int (jump), BLOCK or EXIT of one instruction,
    from the opcode table (``opcodes.OPCODES``)."""
    ins = decode(opcode, ops, self._get)
    entry = OPCODES.get(ins.base)
    if entry is not None and entry.handler in _FAMILIES:   # a family module's function
      return _FAMILIES[entry.handler](self, ins)
    if entry is None or entry.handler is None:
      raise NotImplementedError(f"opcode {opcode} (not in the checker's opcode table, "
                                "mosaic_async_store/check/opcodes.py)")
    return getattr(self, entry.handler)(ins)

  def _exit(self, ins):
    return lambda th: EXIT

  def _call(self, ins):   # only the kernel's failure report (vprintf) calls: log it
    return lambda th: self.calls.append((th.cta, th.tid, ins.opcode))

  def _tcgen05(self, ins):
    # They order tcgen05 operations around a thread synchronisation; every other
    # tcgen05 opcode is refused here, so between what the checker runs they order
    # nothing.
    if ins.mods not in (["fence::before_thread_sync"], ["fence::after_thread_sync"]):
      raise NotImplementedError(f"opcode {ins.opcode}")
    return lambda th: None

  def _nanosleep(self, ins):
    """A hint: let the other threads run (a poll loop's pause: see run.py)."""
    def nanosleep(th):
      th.polled = True
      return YIELD
    return nanosleep

  def _mapa(self, ins):
    put, a, rank = self._set(ins.ops[0], ins.bits), ins.src[1], ins.src[2]
    def mapa(th):
      addr, r = a(th), rank(th)
      if addr >> 24 or not 0 <= r < len(self.smem):
        raise RuntimeError(f"mapa of {addr:#x} to rank {r}")
      put(th, (r + 1) << 24 | addr)
    return mapa

  def _ld(self, ins):
    """ld (vector forms too); generic when it names no state space; strong loads
    (strong.py).  Signed loads narrower than 32 bits (sign extension) and the const
    space are refused."""
    strong = strong_semantics(ins)
    if strong is not None and ins.space != "const":
      return self._strong_ld(ins, *strong)
    if ins.space == "const" or (ins.t[0] == "s" and ins.bits < 32):
      raise NotImplementedError(f"opcode {ins.opcode}")
    dests = ins.ops[0][1] if ins.ops[0][0] == "vec" else [ins.ops[0]]
    puts, addr, size, space = [self._set(o, ins.bits) for o in dests], ins.src[1], \
        ins.bits // 8, ins.space
    insn = len(self.code)   # this instruction's index (it is being compiled)
    mem, n = self._mem_fn(space, size * len(puts)), size * len(puts)
    if len(dests) == 1 and dests[0][0] == "reg":   # the common case, inlined
      reg, mask = dests[0][1], (1 << ins.bits) - 1
      glob, smem = space == "global", space not in _NOT_SHARED   # (local, param: no shadow)
      def load1(th):
        buf, off = mem(th, addr(th))
        if glob:   # (_global_access, inline)
          bad = self.gshadow.access(th, buf, off, n, False, False, insn, None)
          if bad is not None:
            self._global_race(th, buf, off, n, False, bad, None)
        elif smem:
          self._access(th, buf, off, n, write=False, insn=insn)
        th.regs[reg] = int.from_bytes(buf[off:off + n], "little") & mask
      return load1
    def load(th):
      buf, off = mem(th, addr(th))
      self._access(th, buf, off, n, write=False, insn=insn)
      for i, p in enumerate(puts):
        p(th, int.from_bytes(buf[off + i * size:off + (i + 1) * size], "little"))
    return load

  def _st(self, ins):
    """st (weak, or strong: strong.py), st.param (an argument of a call: the callee
    is not run), and st.async with complete_tx."""
    mods, src, size = ins.mods, ins.src, ins.bits // 8
    if ins.space == "param":
      return lambda th: None
    if ins.space != "const" and "async" not in mods:
      return self._store_fn(ins.space, src[0], ins.vals, size, None, strong_semantics(ins))
    if mods[0] == "async" and "mbarrier::complete_tx::bytes" in mods:
      return self._async_fn(src[0], ins.vals, size, None, src[2])
    raise NotImplementedError(f"opcode {ins.opcode}")

  def _red(self, ins):
    """red (strong: .relaxed or .release, into a named state space) and red.async;
    the float forms only for add."""
    mods, t, size = ins.mods, ins.t, ins.bits // 8
    op = next((p for p in mods if p in RED), None)
    floats = t[0] == "f" or t[:2] == "bf"
    if not ins.space or (op, t) not in RED_FORMS or ("noftz" in mods) != (floats and t != "f32"):
      raise NotImplementedError(f"opcode {ins.opcode}")
    if "async" in mods:
      return self._async_fn(ins.src[0], ins.vals, size, (op, t), ins.src[2])
    return self._store_fn(ins.space, ins.src[0], ins.vals, size, (op, t), strong_semantics(ins))

  # -- memory --------------------------------------------------------------------

  def _mem(self, th, space, addr, n):
    """(buffer, offset) of an n-byte access, checked for bounds and alignment.
    ``space`` None: a generic address, whose window says the space (module doc)."""
    if space is None:
      space = ("global" if addr >> GLOBAL_SHIFT else
               "local" if LOCAL_BASE <= addr < LOCAL_BASE + len(th.local) else
               "shared::cluster" if addr >> 24 else "shared")
    if addr % n:
      raise RuntimeError(f"misaligned {n}-byte {space} access at {addr:#x}")
    if space == "global":
      idx, off = (addr >> GLOBAL_SHIFT) - 1, addr & ((1 << GLOBAL_SHIFT) - 1)
      buf = self.gbufs[idx] if 0 <= idx < len(self.gbufs) else b""
    elif space.startswith("shared"):
      if addr >> 24 and space != "shared::cluster":
        raise RuntimeError(f"cluster address {addr:#x} used as a shared::cta address")
      rank = (addr >> 24) - 1 if addr >> 24 else th.cta
      if rank >= len(self.smem):
        raise RuntimeError(f"shared::cluster address {addr:#x}: no such CTA")
      if rank != th.cta:
        if self.exited[rank]:
          raise ProtocolError("exit", f"CTA {th.cta} thread {th.tid} accesses the shared "
                              f"memory of CTA {rank}, which has exited")
        if th.remote_since is None:   # see sync._fence (.sync_restrict::shared::cta)
          th.remote_since = int(th.vc[th.slot])
      buf, off = self.smem[rank], (addr & 0xFFFFFF) - SHARED_BASE
    elif space == "local":
      buf, off = th.local, addr - LOCAL_BASE
    elif space == "param":
      buf, off = self.param_buf, addr
    else:
      raise NotImplementedError(f"state space {space}")
    if off < 0 or off + n > len(buf):
      raise RuntimeError(f"{n}-byte {space} access at {addr:#x} is out of bounds")
    return buf, off

  def _mem_fn(self, space, n):
    """A function (th, addr) -> ``_mem(th, space, addr, n)`` for one instruction:
    the common case (aligned, in bounds, a static space, no other CTA that needs
    the exit check or a first remote access) inline, anything else through
    ``_mem`` itself (its checks and messages)."""
    slow = self._mem
    if space == "global":
      def mem(th, addr):
        idx, gbufs = (addr >> GLOBAL_SHIFT) - 1, self.gbufs
        if not addr % n and 0 <= idx < len(gbufs):
          buf, off = gbufs[idx], addr & _GLOBAL_MASK
          if off + n <= len(buf):
            return buf, off
        return slow(th, space, addr, n)
    elif space in ("shared", "shared::cta", "shared::cluster"):
      cluster = space == "shared::cluster"
      def mem(th, addr):
        hi = addr >> 24
        if not addr % n and (not hi or (cluster and 0 < hi <= len(self.smem))):
          rank = hi - 1 if hi else th.cta
          if rank == th.cta or (th.remote_since is not None and not self.exited[rank]):
            buf, off = self.smem[rank], (addr & 0xFFFFFF) - SHARED_BASE
            if off >= 0 and off + n <= len(buf):
              return buf, off
        return slow(th, space, addr, n)
    else:
      def mem(th, addr):
        return slow(th, space, addr, n)
    return mem

  # -- running -------------------------------------------------------------------

  def _pack_params(self, args):
    """Global buffer i (the i-th argument) goes to (i + 1) << 40; the kernel's
    8-byte parameters get its address (a NumPy array) or its descriptor (Memref);
    then a fresh shadow (global_memory: the bytes now are the initial contents)."""
    self.gbufs, words, shapes, names = [], [], [], []
    for i, a in enumerate(args):
      arr = np.ascontiguousarray(a.array if isinstance(a, Memref) else a)
      addr = (i + 1) << GLOBAL_SHIFT
      self.gbufs.append(bytearray(arr.tobytes()))
      names.append(f"argument {i}" + (f", parameter {self.params[len(words)]}"
                                      if len(words) < len(self.params) else ""))
      if isinstance(a, Memref):   # allocated, aligned, offset, sizes, strides (elements)
        strides = [int(np.prod(arr.shape[k + 1:])) for k in range(arr.ndim)]
        words += [addr, addr, 0, *arr.shape, *strides]
        shapes.append(f"Memref{arr.shape}: {3 + 2 * arr.ndim}")
      else:
        words.append(addr)
        shapes.append("array: 1")
    if len(words) != len(self.params):
      raise ValueError(
          f"the kernel takes {len(self.params)} parameters, the arguments make {len(words)} "
          f"({', '.join(shapes) or 'none'}); expected: one per NumPy array (its address) "
          "and 3 + 2 * ndim per Memref (a memref descriptor)")
    self.param_buf = b"".join(w.to_bytes(8, "little") for w in words)
    self.gshadow = GlobalShadow(self.gbufs, names)
