"""Bulk groups: the completion of the bulk copies that write global memory
(``cp.async.bulk{.tensor}.global.shared::cta.bulk_group``, ``cp.reduce.async.bulk``), and
``cp.async.bulk.commit_group`` / ``cp.async.bulk.wait_group{.read} N``.

Each issuing thread has its ``BulkGroups``: the groups it committed, and per group how
many of its copies still read their source and how many are pending at all (a store
lands in two steps: ``bulk_op.BulkOp``).  Its copies' accesses are known by two clock slots
of its own (``slots.SlotTable``: ``BULK_READS``, ``BULK_WRITES``) at the group's number;
``wait_group N`` blocks (``BulkWait``, a ``waits.Wait``) until every group but the ``N``
newest has completed (``.read``: its reads), then sets the thread's clock in those slots
to the groups it waited for (PTX ISA, cp.async.bulk.wait_group, as recalled, not
checked against the stored text: with ".read" the wait lasts until the groups' bulk
operations "have completed reading from their source locations").  Copies not yet
committed belong to no group a wait covers.
"""

from __future__ import annotations

import numpy as np

from mosaic_async_store.check import program
from mosaic_async_store.check.outcomes import BLOCK, FALLBACK
from mosaic_async_store.check.waits import Wait

__all__ = ["BulkGroups", "BulkGroupDone", "BulkWait", "groups_of", "commit_fn", "wait_fn",
           "BULK_READS", "BULK_WRITES"]

BULK_READS, BULK_WRITES = "bulk group reads", "bulk group writes"


class BulkGroups:
  """A thread's bulk groups: ``committed`` (how many it committed), ``pending``
  (group number -> [copies whose reads are pending, copies pending at all]) and its
  two clock slots (``reads_slot``, ``writes_slot``; made at its first copy)."""

  __slots__ = ("th", "committed", "pending", "reads_slot", "writes_slot")

  def __init__(self, th):
    self.th, self.committed, self.pending = th, 0, {}
    self.reads_slot = self.writes_slot = None

  def describe_access(self, slot, clk):
    """(who, what is missing) for a race with an access of group ``clk``."""
    which = "reads" if slot == self.reads_slot else "writes"
    return (f"the bulk copies of group {clk} of CTA {self.th.cta} thread {self.th.tid} "
            f"({which})", "a cp.async.bulk.wait_group" + (".read" if which == "reads" else "")
            + " by that thread that covers the group, ordered before this access")

  def exit_rule(self, slot, cta) -> str:
    """The exit rule's verdict on a group's access unknown at CTA ``cta``'s exit: its
    own CTA's copies still reading their source are ``exit-async-read`` (a warning:
    ``memory.WARNINGS``); anything else is ``exit``."""
    return "exit-async-read" if slot == self.reads_slot and self.th.cta == cta else "exit"

  def done(self, limit, read_only) -> bool:
    """Whether every group up to ``limit`` has completed (its reads, with ``read_only``)."""
    return all(counts[0 if read_only else 1] == 0
               for g, counts in self.pending.items() if g <= limit)


class BulkGroupDone:
  """The completion of a copy in a bulk group (``asyncops``' completion interface):
  no checks at issue; completing counts it off its group."""

  __slots__ = ("groups", "gid")
  mbarrier = None

  def __init__(self, groups, gid):
    self.groups, self.gid = groups, gid

  @property
  def cta(self):
    return self.groups.th.cta

  def issue(self, k, op):
    pass

  def complete(self, k, op):
    counts = self.groups.pending[self.gid]
    counts[1] -= 1
    if counts == [0, 0]:   # the group completed: waits need not look at it again
      del self.groups.pending[self.gid]
    k.dirty = True


def groups_of(k, th):
  """``th``'s bulk groups, with their clock slots (made at its first copy)."""
  groups = k.bulk.get(th.slot)
  if groups is None:
    groups = k.bulk[th.slot] = BulkGroups(th)
  if groups.reads_slot is None:
    groups.reads_slot = k.slots.allocate(BULK_READS, groups)
    groups.writes_slot = k.slots.allocate(BULK_WRITES, groups)
  return groups


class BulkWait(Wait):
  """``cp.async.bulk.wait_group{.read} N`` blocked: it completes when every group of
  the thread but the ``N`` most recent has completed (``read_only``: its reads)."""

  __slots__ = ("limit", "read_only")

  def __init__(self, limit, read_only):
    self.limit, self.read_only = limit, read_only

  def ready(self, k, th) -> bool:
    return k.bulk[th.slot].done(self.limit, self.read_only)

  def complete(self, k, th) -> None:
    _waited(k.bulk[th.slot], th, self.limit, self.read_only)

  def describe(self, k, th) -> tuple[int, str]:
    return th.pc, (f"bulk groups 1..{self.limit} of CTA {th.cta} thread {th.tid} to "
                   f"complete{' their reads' if self.read_only else ''}")


def _waited(groups, th, limit, read_only):
  """The waiting thread now knows the accesses of groups up to ``limit``."""
  if groups.reads_slot is None or limit < 1:
    return
  th.vc[groups.reads_slot] = max(int(th.vc[groups.reads_slot]), limit)
  if not read_only:
    th.vc[groups.writes_slot] = max(int(th.vc[groups.writes_slot]), limit)


def _waited_lanes(k, held, keep, read_only):
  """``_waited`` of each (thread, its groups) of ``held`` (lanes of one warp) up to its
  groups' committed count less ``keep``, with one NumPy update of their clocks."""
  moved = [(th.row, groups.reads_slot, groups.writes_slot, groups.committed - keep)
           for th, groups in held
           if groups.reads_slot is not None and groups.committed - keep >= 1]
  if not moved:
    return
  rows, reads, writes, limits = (np.array(column) for column in zip(*moved))
  clocks = k.clocks
  clocks[rows, reads] = np.maximum(clocks[rows, reads], limits)
  if not read_only:
    clocks[rows, writes] = np.maximum(clocks[rows, writes], limits)


def commit_fn(k, ins, form):
  """``cp.async.bulk.commit_group``: the thread's open group is committed."""
  def commit(th):
    groups = k.bulk.get(th.slot)
    if groups is None:
      groups = k.bulk[th.slot] = BulkGroups(th)
    groups.committed += 1
  return program.each_lane(commit)


def wait_fn(k, ins, form):
  """``cp.async.bulk.wait_group{.read} N`` (``BulkWait`` where it must block)."""
  keep = form.operand("N")[1]

  def wait(th):
    groups = k.bulk.get(th.slot)
    if groups is None:
      return None
    limit = groups.committed - keep
    if groups.done(limit, form.read):
      _waited(groups, th, limit, form.read)
      return None
    th.wait = BulkWait(limit, form.read)
    return BLOCK

  def wait_lanes(lanes):   # (every lane's groups done: none blocks; else lane by lane)
    held = [(th, groups) for th in lanes if (groups := k.bulk.get(th.slot)) is not None]
    if not all(groups.done(groups.committed - keep, form.read) for _, groups in held):
      return FALLBACK
    _waited_lanes(k, held, keep, form.read)
  wait.lanes = wait_lanes
  return wait
