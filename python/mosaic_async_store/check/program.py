"""A kernel's PTX, parsed and compiled against a machine (``machine.Machine``).

The body is split into statements with ``{}`` scopes (registers and labels of an
inner, inline-asm block shadow the outer ones); each instruction's operands are
parsed (``operand``), its opcode decoded (``opcodes.decode``) and compiled by the
handler its family module registers (``opcodes.OPCODES``) into a function of the
thread; a guard (``@%p`` / ``@!%p``) wraps it; branches are resolved once every
label is known.  An opcode, qualifier, operand or directive the checker does not
run is refused here, naming it and its PTX line: nothing is skipped silently.
``.loc`` / ``.file`` give each instruction its user source line (``lineinfo``).
"""

from __future__ import annotations

import re

from mosaic_async_store.check import lineinfo, opcodes, params, poll_state
from mosaic_async_store.check.addresses import LOCAL_BASE, SHARED_BASE
from mosaic_async_store.check.findings import Stop
from mosaic_async_store.check.opcodes import decode
from mosaic_async_store.check.ops import UNDEFINED, immediate, split_operands
from mosaic_async_store.check.outcomes import FALLBACK, YIELD
from mosaic_async_store.check.registers import read, write

__all__ = ["Program", "setter", "lanes_getter", "with_lanes", "each_lane",
           "negation_allowed"]


def lanes_getter(getter):
  """The warp form of a getter th -> int: lanes -> [int] (its ``lanes``, or one call
  per lane)."""
  form = getattr(getter, "lanes", None)
  return form if form is not None else lambda lanes: [getter(th) for th in lanes]


def with_lanes(fn, lanes_form):
  """``fn`` with its warp form ``lanes_form`` (its ``lanes`` attribute)."""
  fn.lanes = lanes_form
  return fn


def each_lane(fn):
  """``fn`` (th -> None: a lane's own bookkeeping that always goes on and reports
  nothing, a fence or a bulk group's commit) with its warp form: each lane in lane
  order, as lane by lane, without a return to the scheduler per lane."""
  def lanes_form(lanes):
    for th in lanes:
      fn(th)
  return with_lanes(fn, lanes_form)


def negation_allowed(opcode, index, count):
  """Whether operand ``index`` (of ``count``) of ``opcode`` may be a negated predicate
  ``!%p``: the PTX ISA's ``{!}`` sources (``setp``'s and ``vote.sync``'s and
  ``bar.red``'s predicate ``{!}c`` / ``{!}a``), and the predicate sources of the
  logic operations and moves on ``.pred`` and of ``selp`` (which ptxas assembles).
  Anywhere else the operand is refused (``Program._compile``)."""
  base, *mods = opcode.split(".")
  if base in ("and", "or", "xor", "not", "mov") and mods[-1:] == ["pred"]:
    return index >= 1
  if base in ("selp", "setp"):
    return index == 3
  if base == "vote":
    return index == 1
  if base in ("bar", "barrier") and "red" in mods:
    return index == count - 1
  return False


def _is_register(tok, scopes):
  """``%name``, or a bare name (``P1``) that a ``.reg`` of an enclosing scope declares."""
  return tok.startswith("%") or any(tok in sc[1] for sc in scopes)


def _predicate(regs, name):
  """The reads of predicate ``name``'s values, (th -> 0 or 1, lanes -> [0 or 1], or
  None where a lane's is undefined: its caller goes lane by lane, which names the
  lane, or reports ``undefined.Undefined``'s finding there).  A predicate never
  written (LLVM's undef) has no truth value to branch or guard on, so the checker
  refuses it, by name, rather than pick one."""
  col = regs.column(name)
  def one(th):
    v = col[th.row] if col else UNDEFINED
    if v == UNDEFINED:
      raise NotImplementedError(f"predicate {name} read before any write: its value "
                                "is undefined")
    return v
  def lanes_form(lanes):
    values = read(col, lanes)
    try:
      return None if UNDEFINED in values else values
    except Stop:   # (a lane's undefined.Undefined: lane by lane names its lane)
      return None
  return one, lanes_form


def _guarded(regs, fn, guard):
  """``@%p`` / ``@!%p``: the instruction does nothing unless the predicate matches.
  Its warp form (``Program.vcode``) runs ``fn``'s on the lanes whose predicate
  matches (a ``YIELD`` of theirs is theirs alone; ``fn`` is not a branch: its warp
  form never returns a program counter); where ``fn`` has none, it does nothing if
  no lane's predicate matches, else the lanes run ``fn`` one by one (``FALLBACK``)."""
  if guard is None:
    return fn
  pname, want = guard
  pred, pred_lanes = _predicate(regs, pname)
  def guarded(th):
    return fn(th) if pred(th) == want else None
  guarded.guard = guard   # (a wrapper that looks at the registers first: wgmma_guard.RegisterGuard)
  inner = getattr(fn, "lanes", None)
  if inner is not None:
    def guarded_lanes(lanes):
      values = pred_lanes(lanes)
      if values is None:
        return FALLBACK
      on = [th for th, v in zip(lanes, values) if v == want]
      if not on:
        return None
      r = inner(on)
      return dict.fromkeys(on, YIELD) if r is YIELD and len(on) < len(lanes) else r
    guarded.lanes, guarded_lanes.wide = guarded_lanes, getattr(inner, "wide", False)
  else:
    def skipped_lanes(lanes):   # (no warp form: nothing where no lane's guard holds,
      values = pred_lanes(lanes)        # e.g. an initialisation one thread of the CTA does)
      return None if values is not None and want not in values else FALLBACK
    guarded.lanes = skipped_lanes
  return guarded


def _branch(regs, target, guard):
  """``{@%p} bra target``: a function of the thread, with its warp form (every lane
  jumps, none does, or the lanes diverge: lane by lane)."""
  if guard is None:
    def jump(th):
      return target
    jump.lanes, jump.wide = jump, True
    return jump
  pname, want = guard
  pred, pred_lanes = _predicate(regs, pname)
  def branch(th):
    return target if pred(th) == want else None
  def branch_lanes(lanes):
    values = pred_lanes(lanes)
    if values is None:
      return FALLBACK
    taken = values.count(want)   # (each one's truth)
    return target if taken == len(lanes) else None if not taken else FALLBACK
  branch.lanes, branch_lanes.wide = branch_lanes, True
  return branch


def _callee(rest):
  """The function a ``call`` names: ``call{.uni} (ret), name, (args)`` or without the
  return value or arguments."""
  m = re.match(r"\s*(?:\([^)]*\)\s*,\s*)?([$\w]+)", rest)
  if m is None:
    raise NotImplementedError(f"call {rest!r}: no function name")
  return m.group(1)


def setter(k, op, bits):
  """A setter (th, value) of machine ``k`` for a destination register (``_``
  discards); its ``lanes`` attribute is its warp form, (lanes, values) -> None, one
  value per lane; ``column`` / ``registers`` its register's column and the machine's
  ``registers.Registers``)."""
  if op[0] == "sink":
    def sink(th, v):
      return None
    sink.lanes, sink.column = (lambda lanes, values: None), None
    return sink
  regs, mask = k.registers, (1 << bits) - 1
  col = regs.column(op[1])
  def put(th, v):
    if not col:
      regs.allocate(col)
    col[th.row] = v & mask
  def put_lanes(lanes, values):
    write(regs, col, lanes, [v & mask for v in values])
  put.lanes, put.column, put.registers = put_lanes, col, regs
  return put


class Program:
  """The compiled kernel: ``code`` (per instruction, its function of the thread:
  None to go on, a program counter to jump to, ``outcomes.EXIT``, ``BLOCK`` or
  ``YIELD``), ``vcode`` (per instruction, its warp form or None: a function of the
  lanes of a piece, run once for all of them, which returns what ``outcomes`` says;
  a handler gives one as the ``lanes`` attribute of its function), ``wide`` (per
  instruction, whether its warp form is a lane's own computation, which runs lanes of
  several warps at once: its ``wide`` attribute; ``lockstep.piece``), ``texts`` /
  ``lines`` / ``sources`` (its statement, PTX line, user source line or None),
  ``params`` (the kernel's parameter names), ``param_specs`` (each one's type, size
  and offset in the parameter space: ``params.Param``),
  ``symbols`` (name -> (state space, offset)), ``labels``, ``local_bytes``,
  ``finishers`` (what a family's handlers ask to run once the whole kernel is compiled:
  ``wgmma_guard.RegisterGuard``).
  Compiling binds every instruction to ``machine``, which a launch then resets."""

  def __init__(self, text: str, machine):
    self.machine, machine.program = machine, self
    self.files = lineinfo.file_table(text)   # .loc's file ids (lineinfo.py)
    text = re.sub(r"//[^\n]*", "", text)
    m = re.search(r"\.entry\s+\w+\s*\((.*?)\)", text, re.S)
    self.param_specs = params.parse(m.group(1))   # each one's type, size, offset
    self.params = [p.name for p in self.param_specs]
    self.symbols = {p.name: ("param", p.offset) for p in self.param_specs}
    for name in re.findall(r"\.global\s[^;]*?(\w+)\[\d+\]", text[:m.start()]):
      self.symbols[name] = ("global", 0)   # printf formats: never read (address unmapped)
    self.code, self.vcode, self.texts, self.labels, self.local_bytes = [], [], [], {}, 0
    self.lines = []           # the PTX source line of each instruction (1-based)
    self.sources = []         # its "file:line" from the last .loc before it, or None
    self._loc = None
    self.finishers = {}       # name -> f(program), run once every instruction is compiled
    self.named = []           # per instruction, the registers it names (poll_state)
    start = text.index("{", m.end())
    # (``.maxnreg N`` among the performance-tuning directives before the body: the
    # per-thread register count a launch starts with, which ``setmaxnreg`` is checked
    # against: check/control.py)
    maxnreg = re.search(r"\.maxnreg\s+(\d+)", text[m.end():start])
    self.maxnreg = int(maxnreg.group(1)) if maxnreg else None
    self._first_line = text.count("\n", 0, start) + 1
    self._parse(text[start:])

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
          self.named.append(set())
          try:
            self.code.append(self._compile(stmt, scopes, fixups))
          except NotImplementedError as e:   # say where
            raise NotImplementedError(f"PTX line {line}: `{stmt}`: {e}") from None
    targets = {}
    for k, label, chain, guard in fixups:  # branches, once every label is known
      target = next((sc[2][label] for sc in reversed(chain) if label in sc[2]),
                    None)
      targets[k] = self.labels[label] if target is None else target
      self.code[k] = _branch(self.machine.registers, targets[k], guard)
    for finish in self.finishers.values():   # what a family does once all is compiled
      finish(self)
    self.poll_columns = poll_state.columns_by_pc(self.texts, self.named, targets,
                                                 self.machine.registers.column)
    self.vcode = [getattr(fn, "lanes", None) for fn in self.code]
    self.wide = [getattr(f, "wide", False) for f in self.vcode]

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
    elif stmt == '.pragma "nounroll"':   # PTX ISA (recalled): "a directive to disable
      pass   # loop unrolling in the optimizing backend compiler": no semantics to run
    else:   # any other .pragma too: its meaning is not one the checker knows
      raise NotImplementedError(f"directive: {stmt}")

  def operand(self, tok, scopes):
    """-> (reg, name) | (imm, v) | (sym, name) | (vec, [ops]) | (addr, op, off) |
    (pair, op, op) | (npred, name) (``!%p``: the predicate's negation) | (sink,) |
    (tensor, op, [ops]) (a tensor copy's ``[tensorMap, {c0, ...}]``)"""
    if tok == "_":
      return ("sink",)
    if tok.startswith("{"):
      return ("vec", [self.operand(t, scopes) for t in split_operands(tok[1:-1])])
    if tok.startswith("[") and "{" in tok:   # a tensor copy's [tensorMap, {c0, ...}]
      parts = split_operands(tok[1:-1])
      if len(parts) != 2 or not parts[1].startswith("{") or not parts[1].rstrip().endswith("}"):
        raise NotImplementedError(f"operand {tok!r}: not [tensorMap, {{c0, ...}}]")
      return ("tensor", self.operand(parts[0], scopes),
              [self.operand(c, scopes) for c in split_operands(parts[1].strip()[1:-1])])
    if tok.startswith("["):
      m = re.fullmatch(r"\[\s*([^+\]]+?)\s*(?:\+\s*(-?\w+))?\s*\]", tok)
      return ("addr", self.operand(m.group(1), scopes), immediate(m.group(2) or "0"))
    if "|" in tok:
      return ("pair", *(self.operand(t, scopes) for t in tok.split("|")))
    if tok.startswith("!"):   # a negated predicate source; _compile checks where it stands
      inner = self.operand(tok[1:].strip(), scopes)
      if inner[0] != "reg":
        raise NotImplementedError(f"operand {tok!r}: only a predicate register is negated")
      return ("npred", inner[1])
    if _is_register(tok, scopes):  # special registers (%tid.x, ...) are preset ones
      name = next((sc[1][tok] for sc in reversed(scopes) if tok in sc[1]), tok)
      if self.named:   # (the registers each statement names: poll_state)
        self.named[-1].add(name)
      return ("reg", name)
    if tok in self.symbols:
      return ("sym", tok)
    try:
      return ("imm", immediate(tok))
    except ValueError:   # a negated predicate (!%p), an expression, ...: not modelled
      raise NotImplementedError(f"operand {tok!r}") from None

  def getter(self, op):
    """A getter th -> int for a source operand; its ``lanes`` attribute is its warp
    form, lanes -> [int] (``lanes_getter``)."""
    if op[0] == "reg":  # a never-written register (LLVM's undef) reads as garbage:
      col = self.machine.registers.column(op[1])   # bytes built from it show
      def reg(th):
        return col[th.row] if col else UNDEFINED
      reg.lanes = lambda lanes: read(col, lanes)
      return reg
    if op[0] == "npred":   # !%p: the negation of the predicate's one bit
      col = self.machine.registers.column(op[1])
      def negated(th):
        return ((col[th.row] if col else UNDEFINED) & 1) ^ 1
      negated.lanes = lambda lanes: [(v & 1) ^ 1 for v in read(col, lanes)]
      return negated
    if op[0] in ("imm", "sym"):
      v = op[1]
      if op[0] == "sym":
        kind, off = self.symbols[v]
        v = off + {"local": LOCAL_BASE, "shared": SHARED_BASE}.get(kind, 0)
      def const(th):
        return v
      const.lanes = lambda lanes: [v] * len(lanes)
      return const
    if op[0] == "addr":
      base, off = self.getter(op[1]), op[2]
      if op[1][0] == "reg":   # one call per address, not two (a hot path)
        col = self.machine.registers.column(op[1][1])
        def reg_address(th):
          return (col[th.row] if col else UNDEFINED) + off
        reg_address.lanes = lambda lanes: [v + off for v in read(col, lanes)]
        return reg_address
      def address(th):
        return base(th) + off
      address.lanes = lambda lanes: [a + off for a in base.lanes(lanes)]
      return address
    raise NotImplementedError(f"source operand {op}")


  def _compile(self, stmt, scopes, fixups):
    guard = re.match(r"@(!?)(%?\w+)\s+", stmt)
    if guard:
      stmt, pred = stmt[guard.end():], guard.group(2)
      if not _is_register(pred, scopes):
        raise NotImplementedError(f"guard @{pred}: not a declared register")
      guard = (self.operand(pred, scopes)[1], 0 if guard.group(1) else 1)
    opcode, _, rest = stmt.partition(" ")
    if opcode in ("bra", "bra.uni"):
      fixups.append((len(self.code), rest.strip(), list(scopes), guard))
      return None
    if opcode.startswith("call"):
      ops = [("callee", _callee(rest))]
    else:
      ops = [self.operand(t, scopes) for t in split_operands(rest)]
      for i, op in enumerate(ops):
        if op[0] == "npred" and not negation_allowed(opcode, i, len(ops)):
          raise NotImplementedError(f"operand '!{op[1]}' of {opcode}: a negated predicate "
                                    "is not a source operand of this instruction")
    return _guarded(self.machine.registers, self._semantics(opcode, ops), guard)

  def _semantics(self, opcode, ops):
    """The function th -> None (next), int (jump), BLOCK or EXIT of one instruction,
    from the opcode table (``opcodes.OPCODES``)."""
    ins = decode(opcode, ops, self.getter)
    entry = opcodes.OPCODES.get(ins.base)
    if entry is None or entry.handler is None:
      raise NotImplementedError(f"opcode {opcode} (not in the checker's opcode tables: "
                                "the OPCODES of the family modules, "
                                "mosaic_async_store/check/opcodes.py)")
    return entry.handler(self.machine, ins)
