"""Every thread's registers in one launch of the PTX checker, kept as columns.

One list per register name holds a value per thread, at the thread's ``Thread.row``
(CTA by CTA, lane order within: the order of ``Machine.threads``).  A warp form
(``program.Program.vcode``) reads or writes the registers of a piece's lanes, which
are consecutive threads wherever no lane diverged, as one slice of that list instead
of a lookup per lane.  A column no thread has written yet is empty: every thread's
value there is ``ops.UNDEFINED`` (what a never-written register, LLVM's undef, reads
as), so a launch costs a list per register some thread writes, not one per register
and thread.

Compiled code holds on to its registers' lists (``Registers.column``): a launch
empties them in place (``Registers.reset``), it never replaces them.  The lanes a
warp form is given are in ascending row order and distinct (``lockstep``'s pieces and
every subset of one), which ``read`` and ``write`` rely on to see a run of
consecutive rows from its first and last lane.
"""

from __future__ import annotations

from mosaic_async_store.check.ops import UNDEFINED

__all__ = ["Registers", "read", "write"]


class Registers:
  """The registers of every thread of a launch: ``columns`` (register name -> its list,
  one value per thread row; empty: never written), ``blank`` (a full column of
  ``UNDEFINED``, which a column's first write copies), ``written`` (the columns written
  in this launch, in the order of their first writes: ``allocate``)."""

  __slots__ = ("columns", "blank", "written")

  def __init__(self):
    self.columns, self.blank, self.written = {}, [], []

  def column(self, name: str) -> list:
    """The list of register ``name`` (made, empty, on first use; kept across launches)."""
    col = self.columns.get(name)
    if col is None:
      col = self.columns[name] = []
    return col

  def reset(self, rows: int, preset: dict) -> None:
    """A launch of ``rows`` threads: every register unwritten, but ``preset`` (name ->
    one value per row: the special registers, %tid.x, %ctaid.x, ...)."""
    for col in self.columns.values():
      col.clear()
    self.blank, self.written = [UNDEFINED] * rows, []
    for name, values in preset.items():
      col = self.column(name)
      col.extend(values)
      self.written.append(col)

  def allocate(self, col: list) -> None:
    """The first write into empty column ``col``: a value per thread, all
    ``UNDEFINED``, and the column counted as written."""
    col.extend(self.blank)
    self.written.append(col)

  def get(self, name: str, th) -> int:
    """Thread ``th``'s value of register ``name``."""
    col = self.columns.get(name)
    return col[th.row] if col else UNDEFINED

  def put(self, name: str, th, value: int) -> None:
    """Thread ``th``'s register ``name`` becomes ``value`` (already masked)."""
    col = self.column(name)
    if not col:
      self.allocate(col)
    col[th.row] = value

  def put_lanes(self, name: str, lanes, values) -> None:
    """Each of ``lanes``' register ``name`` becomes its value in ``values`` (a list)."""
    write(self, self.column(name), lanes, values)


def read(col: list, lanes) -> list:
  """The values of a register's column ``col`` at each of ``lanes`` (a new list)."""
  if not col:
    return [UNDEFINED] * len(lanes)
  first, n = lanes[0].row, len(lanes)
  if lanes[-1].row - first + 1 == n:   # (consecutive rows: ascending and distinct)
    return col[first:first + n]
  return [col[th.row] for th in lanes]


def write(regs: Registers, col: list, lanes, values) -> None:
  """Each of ``lanes``' value in register column ``col`` becomes its value in
  ``values`` (a sequence as long as ``lanes``)."""
  if not col:
    regs.allocate(col)
  first, n = lanes[0].row, len(lanes)
  if lanes[-1].row - first + 1 == n:   # (consecutive rows: ascending and distinct)
    if len(values) != n:   # (a slice assignment would resize the column: never silently)
      raise ValueError(f"{len(values)} values for {n} lanes")
    col[first:first + n] = values
  else:
    for th, v in zip(lanes, values):
      col[th.row] = v
