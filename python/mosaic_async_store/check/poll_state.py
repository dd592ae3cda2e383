"""Which registers a poll's state needs (``run._polled``): those that can change between
two polls of one thread at one program counter.

A thread that polls twice in the same state, with nothing another thread could see
changed in between (one epoch), parks (``run``'s doc). Its state was every register the
launch had written, which for a WGMMA kernel is hundreds of values per poll. Between two
polls that resume at the same program counter ``p`` the thread ran a path from ``p``
back to ``p``: every instruction on it lies in ``p``'s strongly connected component of
the branch graph (``bra`` targets and fall-throughs; the checker runs no other jumps, no
calls but vprintf's report and no indirect branches). A register no instruction of that
component writes holds the same value at both polls, so comparing the others is the same
test as comparing them all.

What an instruction writes is taken from its statement as compiled: every register it
names (``Program.named``: the destinations and the sources, a safe superset), under the
names compiling gave them (an inline-asm block's registers are renamed there). What a
thread receives while it waits (a ``bar.red`` result, an ``mbarrier.try_wait``
predicate, a collective's value) is written into registers of the instruction it waits
at, which names them. One instruction writes registers it does not name: ``wgmma.wait_group`` writes back the
accumulators of the ``wgmma.mma_async`` operations it waits for (its warp's own, at its
own wait), so a component that holds a WGMMA instruction counts the registers of every
WGMMA instruction. The state keeps the number of columns written in the launch too, as
the full state's length did, so the two tests agree exactly (not only on whether the
thread can make progress).
"""

from __future__ import annotations

from operator import itemgetter

from mosaic_async_store.check import families
from mosaic_async_store.check.findings import Stop

__all__ = ["components", "columns_by_pc", "state"]


def components(successors) -> list[int]:
  """The strongly connected component of each node of a graph (``successors[i]``: the
  nodes ``i`` may go to), as a component number per node (Tarjan's algorithm, without
  recursion: a kernel has thousands of instructions)."""
  n = len(successors)
  index, low, comp = [-1] * n, [0] * n, [-1] * n
  stack, on_stack, counter, ncomp = [], [False] * n, 0, 0
  for root in range(n):
    if index[root] != -1:
      continue
    work = [(root, 0)]
    while work:
      v, i = work.pop()
      if i == 0:
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack[v] = True
      succ = successors[v]
      if i < len(succ):
        work.append((v, i + 1))
        w = succ[i]
        if index[w] == -1:
          work.append((w, 0))
        elif on_stack[w]:
          low[v] = min(low[v], index[w])
        continue
      if low[v] == index[v]:   # v is its component's root: pop the component
        while True:
          w = stack.pop()
          on_stack[w] = False
          comp[w] = ncomp
          if w == v:
            break
        ncomp += 1
      if work:   # (v's parent: its low takes v's)
        parent = work[-1][0]
        low[parent] = min(low[parent], low[v])
  return comp


def columns_by_pc(texts, named, targets, column):
  """Per program counter, the register columns a poll that resumes there compares
  (module doc): ``texts`` (each instruction's statement), ``named`` (the registers each
  one names, as compiled: ``Program.named``), ``targets`` (instruction -> its branch
  target), ``column(name)``: the name's column (``Registers.column``)."""
  n = len(texts)
  successors = [[pc + 1] if pc + 1 < n else [] for pc in range(n)]
  for pc, target in targets.items():
    successors[pc].append(target)
  comp = components(successors)
  names = {}   # component -> the registers its instructions name
  for pc, c in enumerate(comp):
    names.setdefault(c, set()).update(named[pc])
  for prefix in families.unnamed_writes():   # (family.Family.unnamed_writes)
    shared = [pc for pc in range(n) if texts[pc].startswith(prefix)]
    every = set().union(*(named[pc] for pc in shared))
    for pc in shared:
      names[comp[pc]] |= every
  by_comp = {c: tuple(column(name) for name in sorted(group)) for c, group in names.items()}
  return [by_comp[c] for c in comp]


def state(registers, th, columns) -> tuple:
  """Thread ``th``'s values in the written ones of ``columns`` (``columns_by_pc``'s, for
  where it resumes), after how many columns the launch has written
  (``Registers.written``), as a hashable value; an ``undefined.Undefined`` (which has no
  bits to hash) as its description.  A column not written yet holds ``UNDEFINED`` for
  every thread and is left out: it becomes written only by growing that count."""
  values = (len(registers.written), *map(itemgetter(th.row), filter(None, columns)))
  try:
    hash(values)
  except Stop:   # (an undefined.Undefined's hash is its finding)
    values = tuple(v if type(v) is int else repr(v) for v in values)
  return values
