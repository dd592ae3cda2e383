"""A small PTX interpreter and protocol checker: runs one cluster on the CPU.

Scope: the PTX subset of the project's full (non-bare) store kernels and of the
Pallas runtime kernels on sm_90a: integer ALU, predicates, global/shared/local
loads and stores (also generic ones, without a state space), ``mapa``,
``st.async`` / ``red.async`` with ``complete_tx``, plain ``st`` / ``red`` into
``.shared::cluster``, mbarriers, ``shfl.sync``, ``elect.sync`` and CTA / cluster
barriers.  Any other opcode raises NotImplementedError (naming it) when the
kernel is parsed: nothing is skipped silently.

Model:
  * each thread of each CTA is interpreted on its own and runs until it reaches
    a synchronising instruction (warp collective, ``bar.sync``,
    ``barrier.cluster.wait``, an unfinished ``mbarrier.try_wait``), or, under a
    seeded schedule, pauses after an arrive or an asynchronous store; the
    scheduler picks the next thread and releases the participants once a
    synchronisation can complete;
  * asynchronous stores (``st.async`` / ``red.async``) and their complete_tx
    land when the schedule says, in any order (``ptx_memory.Schedule``);
    memory ordering is checked by vector clocks with scopes, per SMEM byte
    (``ptx_memory``), and every violated rule raises ``ProtocolError``;
  * ``mbarrier.try_wait`` on an unfinished phase blocks; it returns false (the
    hardware time limit expiring) only when no thread can make progress any
    more and nothing is in flight, i.e. when the barrier can never complete;
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

from ptx_memory import ProtocolError, Schedule, Shadow
from ptx_sync import BLOCK, YIELD, SyncSemantics
from ptx_ops import (ALU, RED, TYPE, bfe, bfi, bits_of, immediate, prmt, reduce_op, sign_extend,
                     split_operands)

SHARED_BASE = 0x400            # sm_90 reserves the first 1 KiB of the shared window
LOCAL_BASE, GLOBAL_SHIFT = 0x100000, 40
EXIT = object()                 # returned by an instruction: this thread stops
UNDEFINED = 0xA5C3A5C3A5C3A5C3  # what an unwritten register holds (setters mask it)


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


class Thread:
  """One thread: registers, where it is, and its memory-model state (``vc``: its
  vector clock; ``unscoped``: clocks it saw through pairs whose scopes do not
  include each other; ``fence_rel``: the clock its last fence releases with a
  later relaxed arrive; ``pending_obs``: phases a relaxed wait observed)."""

  __slots__ = ("regs", "pc", "cta", "tid", "state", "wait", "cluster_arrived", "local",
               "slot", "vc", "unscoped", "fence_rel", "pending_obs")

  def __init__(self, cta, tid, special, local_bytes, slot, nslots):
    self.regs, self.pc, self.cta, self.tid = dict(special), 0, cta, tid
    self.state, self.wait, self.cluster_arrived = "run", None, 0
    self.local = bytearray(local_bytes)
    self.slot, self.vc, self.unscoped = slot, np.zeros(nslots, np.int64), np.zeros(nslots, np.int64)
    self.vc[slot], self.fence_rel, self.pending_obs = 1, None, []


class AsyncOp:
  """An ``st.async`` / ``red.async`` in flight: what lands where, on which barrier."""

  __slots__ = ("th", "vc", "cta", "off", "size", "values", "red", "key", "text", "idx")

  def __init__(self, th, cta, off, size, values, red, key, text):
    self.th, self.vc, self.cta, self.off, self.size = th, th.vc.copy(), cta, off, size
    self.values, self.red, self.key, self.text = values, red, key, text


class PtxKernel(SyncSemantics):
  """``PtxKernel(ptx_text).launch(buffers, cluster=..., smem_bytes=...)``."""

  def __init__(self, text: str):
    text = re.sub(r"//[^\n]*", "", text)
    m = re.search(r"\.entry\s+\w+\s*\((.*?)\)", text, re.S)
    self.params = re.findall(r"(\w+)\s*(?:,|$)", m.group(1).strip())
    self.symbols = {p: ("param", 8 * i) for i, p in enumerate(self.params)}
    for name in re.findall(r"\.global\s[^;]*?(\w+)\[\d+\]", text[:m.start()]):
      self.symbols[name] = ("global", 0)   # printf formats: never read (address unmapped)
    self.code, self.texts, self.labels, self.collectives, self.local_bytes = [], [], {}, {}, 0
    self._parse(text[text.index("{", m.end()):])

  # -- parsing -----------------------------------------------------------------

  def _parse(self, body):
    """Splits the body into statements, tracking ``{}`` scopes: registers and
    labels declared in an inner (inline asm) block shadow the outer ones."""
    scopes, nblock, fixups, i = [], 0, [], 0  # scope: (id, {reg: renamed}, {label: pc})
    while i < len(body):
      if body[i].isspace():
        i += 1
      elif body[i] in "{}":
        nblock += 1
        scopes = scopes + [(nblock, {}, {})] if body[i] == "{" else scopes[:-1]
        i += 1
      elif lab := re.match(r"([$\w]+):", body[i:i + 100]):
        (scopes[-1][2] if len(scopes) > 1 else self.labels)[lab.group(1)] = len(self.code)
        i += lab.end()
      else:
        j = body.index(";", i)
        stmt, i = " ".join(body[i:j].split()), j + 1
        if stmt.startswith("."):
          self._declare(stmt, scopes)
        elif stmt:
          self.texts.append(stmt)
          self.code.append(self._compile(stmt, scopes, fixups))
    for k, label, chain, guard in fixups:  # branches, once every label is known
      target = next((sc[2][label] for sc in reversed(chain) if label in sc[2]),
                    None)
      target = self.labels[label] if target is None else target
      self.code[k] = _guarded(lambda th, t=target: t, guard)

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
    return ("sym", tok) if tok in self.symbols else ("imm", immediate(tok))

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

  def _semantics(self, opcode, ops):  # noqa: C901  (one dispatch on the opcode)
    """The function th -> None (next), int (jump), BLOCK or EXIT of one instruction."""
    base, *mods = opcode.split(".")
    types = [p for p in mods if TYPE.match(p)]
    t = types[-1] if types else "b0"
    bits, signed = bits_of(t), t[0] == "s"
    space = next((p for p in mods if p.split("::")[0] in ("global", "shared", "local",
                                                           "param", "const")), None)
    src = [self._get(o) if o[0] in ("reg", "imm", "sym", "addr") else None for o in ops]
    vals = [self._get(o) for o in ops[1][1]] if len(ops) > 1 and ops[1][0] == "vec" else src[1:2]
    if base in ("fence", "membar"):
      return self._fence(mods)
    if base in ("ret", "exit"):
      return lambda th: EXIT
    if base == "call":   # only the kernel's failure report (vprintf) calls: log it
      return lambda th: self.calls.append((th.cta, th.tid, opcode))
    if base in ("mov", "cvta"):  # (cvta: generic and specific addresses coincide here)
      d, s = ops
      if s[0] == "vec":   # pack {lo, ..., hi} into one register
        w, parts, put = bits // len(s[1]), [self._get(o) for o in s[1]], self._set(d, bits)
        return lambda th: put(th, sum((g(th) & ((1 << w) - 1)) << (w * i)
                                      for i, g in enumerate(parts)))
      if d[0] == "vec":   # unpack one register into pieces
        w, g = bits // len(d[1]), src[1]
        puts = [self._set(o, w) for o in d[1]]
        return lambda th: [p(th, g(th) >> (w * i)) for i, p in enumerate(puts)] and None
      put, g = self._set(d, bits), src[1]
      return lambda th: put(th, g(th))
    if base in ALU:
      sv = (lambda v: sign_extend(v, bits)) if signed else (lambda v: v)
      fn = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "and": lambda a, b: a & b,
            "or": lambda a, b: a | b, "xor": lambda a, b: a ^ b, "not": lambda a: ~a,
            "neg": lambda a: -a, "shl": lambda a, b: a << b if b < bits else 0,
            "shr": lambda a, b: sv(a) >> min(b, bits - 1) if signed or b < bits else 0,
            "min": lambda a, b: min(sv(a), sv(b)), "max": lambda a, b: max(sv(a), sv(b)),
            "selp": lambda a, b, p: a if p else b, "bfe": bfe(bits, signed), "bfi": bfi(bits),
            "prmt": prmt, "mul": lambda a, b: sv(a) * sv(b),
            "mad": lambda a, b, c: sv(a) * sv(b) + c}[base]
      if (base in ("mul", "mad") and not {"lo", "wide"} & set(mods)) or \
         (base == "prmt" and mods != ["b32"]):
        raise NotImplementedError(f"opcode {opcode}")
      put, args = self._set(ops[0], 2 * bits if "wide" in mods else bits), src[1:]
      if len(args) == 2:
        a0, a1 = args
        return lambda th: put(th, fn(a0(th), a1(th)))
      return lambda th: put(th, fn(*(a(th) for a in args)))
    if base == "setp" and len(ops) == 3 and ops[0][0] == "reg" and t[0] != "f":
      cmp = {"eq": "__eq__", "ne": "__ne__", "lt": "__lt__", "le": "__le__", "gt": "__gt__",
             "ge": "__ge__", "lo": "__lt__", "ls": "__le__", "hi": "__gt__", "hs": "__ge__"}
      cmp = cmp[mods[0]]
      put, a, b = self._set(ops[0], 1), src[1], src[2]
      sv = (lambda v: sign_extend(v, bits)) if signed else (lambda v: v)
      return lambda th: put(th, getattr(sv(a(th)), cmp)(sv(b(th))))
    if base == "cvt" and len(types) == 2 and "f" not in types[0][0] + types[1][0]:
      sbits, put, g = bits_of(types[1]), self._set(ops[0], bits_of(types[0])), src[1]
      if types[1][0] == "s":   # sign-extend, then wrap to the destination
        return lambda th: put(th, sign_extend(g(th), sbits))
      return lambda th: put(th, g(th) & ((1 << sbits) - 1))
    if base == "mapa":
      put, a, rank = self._set(ops[0], bits), src[1], src[2]
      def mapa(th):
        addr, r = a(th), rank(th)
        if addr >> 24 or not 0 <= r < len(self.smem):
          raise RuntimeError(f"mapa of {addr:#x} to rank {r}")
        put(th, (r + 1) << 24 | addr)
      return mapa
    if base == "ld" and space != "const" and (t[0] != "s" or bits >= 32):  # None: generic
      dests = ops[0][1] if ops[0][0] == "vec" else [ops[0]]
      puts, addr, size = [self._set(o, bits) for o in dests], src[1], bits // 8
      def load(th):
        buf, off = self._mem(th, space, addr(th), size * len(puts))
        self._access(th, buf, off, size * len(puts), write=False)
        for i, p in enumerate(puts):
          p(th, int.from_bytes(buf[off + i * size:off + (i + 1) * size], "little"))
      return load
    if base == "st" and space == "param":  # argument of a call (the callee is not run)
      return lambda th: None
    if base == "st" and space != "const" and "async" not in mods:
      return self._store_fn(space, src[0], vals, bits // 8, None)
    if base == "st" and mods[0] == "async" and "complete_tx::bytes" in opcode:
      return self._async_fn(src[0], vals, bits // 8, None, src[2])
    if base == "red" and space and ("add" in mods or t[0] in "us" or t[:2] == "b3"):
      op = next(p for p in mods if p in RED)
      if "async" in mods:
        return self._async_fn(src[0], vals, bits // 8, (op, t), src[2])
      return self._store_fn(space, src[0], vals, bits // 8, (op, t))
    if base == "mbarrier":
      return self._mbarrier(mods, ops, src, space)
    if base in ("shfl", "elect") and mods[0] == "sync" and (base == "elect" or
                                                            mods[1] in ("idx", "bfly")):
      return self._warp_collective(base, mods, ops, src)
    if base == "stmatrix" and mods[:4] == ["sync", "aligned", "m8n8", "x4"] and t == "b16":
      return self._stmatrix("trans" in mods, space, src[0], vals)
    if base == "ldmatrix" and mods[:3] == ["sync", "aligned", "m8n8"] and t == "b16" and \
       mods[3] in ("x1", "x2", "x4"):
      dests = ops[0][1] if ops[0][0] == "vec" else [ops[0]]
      return self._ldmatrix("trans" in mods, space, dests, src[1])
    if base in ("bar", "barrier") and mods[0] in ("sync", "aligned") and len(ops) in (1, 2):
      count = src[1] if len(ops) == 2 else None  # bar.sync id, nthreads (a named barrier)
      def bar(th, bar_id=src[0]):
        if count is not None and count(th) != th.regs["%ntid.x"]:
          raise NotImplementedError("bar.sync over fewer threads than the CTA")
        th.wait = ("bar", bar_id(th))
        return BLOCK
      return bar
    if base == "barrier" and mods[:2] == ["cluster", "arrive"]:
      return self._cluster_arrive(mods[2:])
    if base == "barrier" and mods[:2] == ["cluster", "wait"]:
      return self._cluster_wait(mods[2:])
    raise NotImplementedError(f"opcode {opcode} (operands {ops})")

  def _store_fn(self, space, addr, vals, size, red):
    """st / red (weak, or relaxed atomics): written at once, checked for races."""
    mask = (1 << (8 * size)) - 1
    def store(th):
      buf, off = self._mem(th, space, addr(th), size * len(vals))
      self._access(th, buf, off, size * len(vals), write=True, atomic=red is not None)
      self._write(buf, off, size, [g(th) & mask for g in vals], red)
    return store

  @staticmethod
  def _write(buf, off, size, values, red):
    for i, new in enumerate(values):
      at = slice(off + i * size, off + (i + 1) * size)
      buf[at] = (reduce_op(*red, int.from_bytes(buf[at], "little"), new) if red else
                 new).to_bytes(size, "little")

  def _async_fn(self, addr, vals, size, red, mbar):
    """st.async / red.async: checked at issue, queued, landed by the schedule."""
    mask, text = (1 << (8 * size)) - 1, "red.async" if red else "st.async"
    def issue(th):
      n = size * len(vals)
      buf, off = self._mem(th, "shared::cluster", addr(th), n)
      cta, key = self._cta_of(buf), self._bar_key(th, "shared::cluster", mbar(th))
      where = f"CTA {th.cta} thread {th.tid}: {text} into CTA {cta}"
      if len(self.smem) == 1:
        raise ProtocolError("st.async-cluster-of-one", where)
      if key[0] != cta:
        raise ProtocolError("barrier-elsewhere", f"{where} completing on CTA {key[0]}'s "
                            "mbarrier")
      if red and cta == th.cta:
        raise ProtocolError("red.async-self", where)
      self._barrier(th, th.vc, key)
      self.shadow[cta].mark_inflight(off, n, 1, atomic=red is not None)
      op = AsyncOp(th, cta, off, size, [g(th) & mask for g in vals], red, key, where)
      op.idx = len(self.inflight)
      self.inflight.append(op)
      th.vc[th.slot] += 1
      return YIELD if self.sched.yields() else None
    return issue

  def _land(self, op):
    """The data of ``op`` lands; then its complete_tx on the barrier."""
    self._unqueue(self.inflight, op.idx)
    n = op.size * len(op.values)
    self.shadow[op.cta].mark_inflight(op.off, n, -1, atomic=op.red is not None)
    bar = self._barrier(None, op.vc, op.key)
    self._check(op.vc, None, op.cta, op.off, n, write=True, atomic=op.red is not None,
                who=op.text, stamp=(bar.slot, bar.phase + 1))
    self._write(self.smem[op.cta], op.off, op.size, op.values, op.red)
    self._add_tx(bar, -n)
    self._advance(bar)

  def _cta_of(self, buf):
    return self.smem_cta[id(buf)]

  def _access(self, th, buf, off, n, *, write, atomic=False):
    """A thread's access to ``buf``: checked against the byte history if it is SMEM."""
    cta = self.smem_cta.get(id(buf))
    if cta is not None:
      self._check(th.vc, th, cta, off, n, write=write, atomic=atomic,
                  who=f"CTA {th.cta} thread {th.tid}", stamp=(th.slot, th.vc[th.slot]))

  def _check(self, vc, th, cta, off, n, *, write, atomic, who, stamp):
    """Raises unless the access is ordered after the conflicting earlier ones;
    then records it (``stamp``: the (slot, clock) it is known by)."""
    sh = self.shadow[cta]
    bad = sh.conflict(vc, off, n, write=write, atomic=atomic)
    if bad is not None:
      what = f"{who} {'writes' if write else 'reads'} CTA {cta} SMEM bytes {off}..{off + n - 1}"
      if bad[0] == "in flight":
        raise ProtocolError("early-read", f"{what} while an asynchronous store into them is "
                            "in flight")
      self._conflict(what, *bad, th)
    sh.record(off, n, write=write, atomic=atomic, stamp=stamp)

  def _conflict(self, what, how, slot, clk, th):
    if slot >= self.barrier_slot0:
      bar = next(b for b in self.mbar.values() if b.slot == slot)
      raise ProtocolError("early-read", f"{what}, {how} the asynchronous stores of "
                          f"phase {clk - 1} of {bar.describe()}, which it has not observed")
    other = self.threads[slot - 1]
    detail = f"{what}, {how} CTA {other.cta} thread {other.tid}, with no happens-before"
    if th is not None and th.unscoped[slot] >= clk:
      detail += (" (they synchronised only through a release/acquire pair whose scopes do "
                 "not include each other: not morally strong)")
    raise ProtocolError("race", detail)

  def _ldmatrix(self, trans, space, dests, addr):
    """``ldmatrix.sync.aligned.m8n8.x<n>{.trans}.shared.b16 {r0..}, [p]``: a warp loads
    n 8x8 matrices of 16-bit elements (stmatrix's inverse).  Lane ``8i + j`` gives the
    address of row ``j`` of matrix ``i``; register ``ri`` of lane ``l`` receives row
    ``l // 4``, columns ``2 (l % 4)`` and ``+1`` (low half first) of matrix ``i``;
    ``.trans`` loads each matrix transposed (register row ``r`` = memory column ``r``)."""
    puts, k = [self._set(o, 32) for o in dests], len(self.code)

    def resolve(lanes):
      rows = []                                  # rows[8 i + j]: row j of matrix i
      for reader in lanes[:8 * len(puts)]:
        buf, off = self._mem(reader, space, addr(reader), 16)
        self._access(reader, buf, off, 16, write=False)
        rows.append(bytes(buf[off:off + 16]))
      for lane, th in enumerate(lanes):
        for i, put in enumerate(puts):
          word = 0
          for half, col in enumerate((2 * (lane % 4), 2 * (lane % 4) + 1)):
            r, c = (col, lane // 4) if trans else (lane // 4, col)   # memory row, column
            word |= int.from_bytes(rows[8 * i + r][2 * c:2 * c + 2], "little") << (16 * half)
          put(th, word)
    self.collectives[k] = resolve

    def block(th):
      th.wait = ("warp", k)
      return BLOCK
    return block

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

  # -- running -------------------------------------------------------------------

  def _pack_params(self, args):
    """Global buffer i (the i-th argument) goes to (i + 1) << 40; the kernel's
    8-byte parameters get its address (a NumPy array) or its descriptor (Memref)."""
    self.gbufs, words, shapes = [], [], []
    for i, a in enumerate(args):
      arr = np.ascontiguousarray(a.array if isinstance(a, Memref) else a)
      addr = (i + 1) << GLOBAL_SHIFT
      self.gbufs.append(bytearray(arr.tobytes()))
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

  def launch(self, buffers, *, cluster, smem_bytes, block=128, max_timeouts=64, schedule=0,
             barrier_slots=64):
    """Runs one cluster of ``cluster`` CTAs of ``block`` threads under the seeded
    ``schedule`` (see ptx_memory.Schedule).  ``buffers`` (NumPy arrays or
    ``Memref``s, in parameter order: see _pack_params) are copied in; returns
    their contents afterwards, in argument order, as uint8 arrays.  Raises
    ProtocolError on a violated rule."""
    self._pack_params(buffers)
    self.smem = [bytearray(b"\xcd" * smem_bytes) for _ in range(cluster)]  # uninitialised
    self.shadow = [Shadow(smem_bytes) for _ in range(cluster)]
    self.smem_cta = {id(b): i for i, b in enumerate(self.smem)}
    self.mbar, self.calls, self.timeouts, self.threads = {}, [], 0, []
    self.sched, self.inflight, self.cluster_gens = Schedule(schedule), [], []
    self.barrier_slot0 = 1 + cluster * block   # slot 0: initial memory; then the threads
    nslots = self.barrier_slot0 + barrier_slots
    for c in range(cluster):
      for t in range(block):
        special = {"%tid.x": t, "%ntid.x": block, "%ctaid.x": c, "%nctaid.x": cluster,
                   "%cluster_ctaid.x": c, "%cluster_nctaid.x": cluster,
                   "%cluster_ctarank": c, "%cluster_nctarank": cluster,
                   "%laneid": t % 32, "%warpid": t // 32}
        for ax in "yz":
          special.update({f"%{r}.{ax}": n for r, n in (
              ("tid", 0), ("ntid", 1), ("ctaid", 0), ("nctaid", 1), ("cluster_ctaid", 0),
              ("cluster_nctaid", 1))})
        self.threads.append(Thread(c, t, special, self.local_bytes, len(self.threads) + 1,
                                   nslots))
    self.runnable, self.dirty = list(self.threads), True
    while True:
      if self.runnable:
        i = self.sched.pick_index(len(self.runnable))
        th = self.runnable[i]
        self._exec(th)
        if th.state != "run":   # blocked or done: out of the run queue
          self._unqueue(self.runnable, i)
          self.dirty = True
        for op in self.sched.landing_now(self.inflight):
          self._land(op)
        if self.dirty:
          self._resolve()
        continue
      if self.dirty and self._resolve():
        continue
      if self.inflight:   # nothing else can happen: something lands
        self._land(self.sched.landing_when_stuck(self.inflight))
        continue
      if all(th.state == "done" for th in self.threads):
        return [np.frombuffer(bytes(b), np.uint8) for b in self.gbufs]
      pollers = [th for th in self.threads if th.state == "block" and th.wait[0] == "mbar"]
      if not pollers or self.timeouts >= max_timeouts:
        waits = sorted({self._describe_wait(th) for th in self.threads if th.state == "block"})
        raise ProtocolError("hang", f"deadlock after {self.timeouts} timed-out polls; "
                            f"waits: {waits}")
      self.timeouts += 1   # nothing can change any more: these polls time out
      for th in pollers:
        th.regs[th.wait[3]] = 0
        self._resume(th)

  def _describe_wait(self, th):
    if th.wait[0] == "mbar":
      return f"CTA {th.cta} waits for parity {th.wait[2]} of {self.mbar[th.wait[1]].describe()}"
    return f"CTA {th.cta} waits at {th.wait[0]}"

  def _exec(self, th, max_back_jumps=1 << 20):
    """Runs ``th`` until it blocks or exits."""
    code, pc, jumps = self.code, th.pc, 0
    try:
      while True:
        r = code[pc](th)
        if r is None:
          pc += 1
        elif r is BLOCK or r is EXIT:
          th.pc, th.state = pc, "block" if r is BLOCK else "done"
          return
        elif r is YIELD:   # done; the schedule lets another thread go first
          th.pc = pc + 1
          return
        else:
          jumps += r <= pc
          if jumps > max_back_jumps:
            raise RuntimeError("runaway loop")
          pc = r
    except ProtocolError as e:  # say where, keep the rule
      raise ProtocolError(e.rule, f"at `{self.texts[pc]}`: {e.args[0].rsplit(' [', 1)[0]}") from e
    except Exception as e:  # say where, then re-raise
      raise RuntimeError(f"CTA {th.cta} thread {th.tid} at `{self.texts[pc]}`: "
                         f"{type(e).__name__}: {e}") from e

  def _resume(self, th):
    th.pc, th.state, th.wait = th.pc + 1, "run", None
    self.runnable.append(th)

  @staticmethod
  def _unqueue(queue, i):
    """Removes ``queue[i]`` in O(1) (the last element takes its place)."""
    last = queue.pop()
    if i < len(queue):
      queue[i] = last
      if isinstance(last, AsyncOp):
        last.idx = i

  def _resolve(self):
    """Releases every thread whose synchronisation can complete now."""
    woke, groups, self.dirty = False, {}, False
    blocked = [th for th in self.threads if th.state == "block"]
    if any(th.wait[0] == "cluster" for th in blocked):
      min_arrived = min(th.cluster_arrived for th in self.threads)
    for th in blocked:
      kind = th.wait[0]
      if (kind == "mbar" and self.mbar[th.wait[1]].phase & 1 != th.wait[2]) or \
         (kind == "cluster" and min_arrived >= th.wait[1]):
        if kind == "mbar":
          _, key, _, pred, sem, scope = th.wait
          self._observe(th, self.mbar[key], sem, scope)
          th.regs[pred] = 1
        else:
          self._cluster_woken(th)
        self._resume(th)
        woke = True
      elif kind in ("warp", "bar"):
        groups.setdefault((kind, th.cta, th.tid // 32 if kind == "warp" else 0), []).append(th)
    for (kind, cta, _), ths in groups.items():
      size = 32 if kind == "warp" else sum(th.cta == cta and th.state != "done"
                                           for th in self.threads)
      if len(ths) == size and len({th.wait for th in ths}) == 1:
        if kind == "warp":
          self.collectives[ths[0].wait[1]](sorted(ths, key=lambda x: x.tid))
        else:
          self._cta_barrier_woken(ths)
        for th in ths:
          self._resume(th)
        woke = True
    return woke
