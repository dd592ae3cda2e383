"""The vector clocks' slots and who owns each: the checker's slot table.

Happens-before is kept in vector clocks (``memory``): one entry per *slot*, and every
slot has an owner, named here instead of by position:

  * slot 0, ``INITIAL``: the memory's contents at launch;
  * slots 1..N, ``THREAD``: the threads, in CTA then thread order (slot ``i`` is
    ``Machine.threads[i - 1]``; a thread's clock row is ``Machine.clocks[i - 1]``);
  * then slots made as the run needs them (``allocate``), each with its kind and
    the object it stands for: ``MBARRIER_DATA`` (the asynchronous data an mbarrier's
    phases make visible: its clock is the phase number), ``MBARRIER_INIT`` (its
    initialisation, which ``fence.mbarrier_init`` releases alone), and whatever a new
    family declares (a bulk group's completion, a CTA's copy engine: a kind is a
    string, the table knows none of their meanings).

A rule that asks who made an access reads ``owner(slot)``; one that needs every slot
of a kind reads ``indices(kind)`` (an index array, for NumPy).  The table has a fixed
capacity per launch (the clocks are a matrix): past it, ``allocate`` refuses by name.
"""

from __future__ import annotations

import numpy as np

__all__ = ["INITIAL", "THREAD", "MBARRIER_DATA", "MBARRIER_INIT", "Owner", "SlotTable"]

INITIAL, THREAD = "initial", "thread"
MBARRIER_DATA, MBARRIER_INIT = "mbarrier data", "mbarrier init"


class Owner:
  """Who a slot stands for: ``kind`` and the object (a thread, an ``mbarrier_state.Mbarrier``,
  what a family put there; None for the initial contents)."""

  __slots__ = ("kind", "obj")

  def __init__(self, kind, obj):
    self.kind, self.obj = kind, obj

  def __repr__(self):
    return f"Owner({self.kind!r}, {self.obj!r})"


class SlotTable:
  """The owners of a launch's ``capacity`` slots: the initial contents, the
  ``threads`` (in slot order), and those ``allocate`` adds."""

  def __init__(self, threads, capacity):
    self.owners = [Owner(INITIAL, None)] + [Owner(THREAD, th) for th in threads]
    self.capacity = capacity
    self._indices = {}   # kind -> its slots as an index array (made again after allocate)

  @property
  def first_free(self) -> int:
    return len(self.owners)

  def allocate(self, kind: str, obj=None) -> int:
    """A new slot owned by ``obj`` of ``kind``; refuses (NotImplementedError, naming
    what ran out) when the launch's clocks have no slot left."""
    if len(self.owners) >= self.capacity:
      raise NotImplementedError(
          f"more clock slots than the checker gives a launch ({self.capacity}: threads, "
          f"mbarriers and asynchronous groups together), at a {kind}; pass a larger "
          "barrier_slots to launch")
    self.owners.append(Owner(kind, obj))
    self._indices.pop(kind, None)
    return len(self.owners) - 1

  def own(self, slot: int, obj) -> None:
    """Slot ``slot`` now stands for ``obj`` (an allocation made before its object)."""
    self.owners[slot].obj = obj

  def owner(self, slot: int) -> Owner:
    return self.owners[slot]

  def kind(self, slot: int) -> str:
    return self.owners[slot].kind

  def indices(self, kind: str) -> np.ndarray:
    """Every slot of ``kind`` so far, in order (an index array)."""
    found = self._indices.get(kind)
    if found is None:
      found = self._indices[kind] = np.fromiter(
          (i for i, o in enumerate(self.owners) if o.kind == kind), np.intp)
    return found

  def cta_of(self, slot: int):
    """The CTA of a thread's slot, else None."""
    owner = self.owners[slot]
    return owner.obj.cta if owner.kind == THREAD else None
