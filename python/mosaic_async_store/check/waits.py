"""What a blocked thread waits for, as objects: the ``Wait`` protocol of the checker.

A thread whose instruction returns ``outcomes.BLOCK`` has set ``Thread.wait`` to a
``Wait``.  The scheduler (``run``) knows nothing of the kinds: it calls

  * ``on_block(k, th)`` when the thread starts waiting (bookkeeping; it marks the run
    ``dirty`` if the wait may already complete);
  * ``ready(k, th)`` in ``run._resolve``: whether it completes now; then
    ``complete(k, th)`` (its effects: an acquire, a predicate set) and ``resume``
    (for a kind that ``observes_late``, only once no runnable thread is of a lower
    class: ``run``'s doc, "Late observers");
  * for a ``grouped`` kind, ``resolve_group(k, threads)`` instead, once per resolve with
    every thread waiting on a wait of that class (in thread order): a warp collective
    completes for its lanes together, the cluster barrier's readiness is one count;
  * ``describe(k, th)`` -> (program counter, words) for a hang report;
  * ``time_out(k, th)`` for a kind that ``can_time_out`` (``mbarrier.try_wait``: when
    nothing else can change, it returns false instead of hanging);
  * ``on_resume(k, th)`` when it goes on (bookkeeping).

A new kind of wait (a bulk group's ``cp.async.bulk.wait_group``, a WGMMA group) is one
class with these methods, made by its family's handler; ``run`` is not edited.  The
kinds today: ``sync.MbarrierWait``, ``warp.Meeting``, ``barrier_warps.NamedWait``,
``cluster_barrier.ClusterWait``, and ``PollWait`` below (a parked poller: the scheduler's
own).  ``resume`` and ``block`` live here, below every family, so that a family that
wakes a thread (a barrier's completing arrival) needs no import of the scheduler.
"""

from __future__ import annotations

__all__ = ["Wait", "PollWait", "resume", "resume_all", "block", "block_all"]


class Wait:
  """The protocol (module doc); the defaults suit a wait that only another thread's
  action ends (it calls ``resume`` itself: a named barrier's completing arrival)."""

  __slots__ = ()
  grouped = False        # resolved together with the other waits of its class
  can_time_out = False   # a poll that returns false when nothing else can change
  # completes only when no runnable thread is of a lower class (an mbarrier phase wait,
  # with ``key`` and ``phase``: it observes a completed phase as late as it can, run's
  # doc), else as soon as it is ready
  observes_late = False
  advance = 1            # how far the program counter moves on resume

  def on_block(self, k, th) -> None:
    """``th`` starts waiting."""

  def on_resume(self, k, th) -> None:
    """``th`` goes on."""

  def ready(self, k, th) -> bool:
    """Whether the wait completes now (checked in ``run._resolve``)."""
    return False

  def complete(self, k, th) -> None:
    """The wait's effects on ``th`` as it completes (before ``resume``)."""

  @classmethod
  def resolve_group(cls, k, threads) -> bool:
    """Completes what it can of ``threads`` (every thread waiting on this class, in
    thread order); True if one went on.  For a ``grouped`` class."""
    raise NotImplementedError(cls.__name__)

  def time_out(self, k, th) -> None:
    """Nothing can change any more: the wait gives up (``can_time_out``)."""
    raise NotImplementedError(type(self).__name__)

  def describe(self, k, th) -> tuple[int, str]:
    """(program counter, what it waits for) for a hang report."""
    return th.pc, type(self).__name__


class PollWait(Wait):
  """A parked poller (``run._polled``): it yielded after its poll at ``pc`` (it stands
  after it: no advance) and waits until something another thread can see changes."""

  __slots__ = ("pc",)
  advance = 0

  def __init__(self, pc):
    self.pc = pc

  def on_resume(self, k, th) -> None:
    th.poll_what = None

  def describe(self, k, th) -> tuple[int, str]:
    if th.poll_what is not None:   # a timed-out wait's loop: what that wait was for
      pc, wait = th.poll_what
      return pc, wait.describe(k, th)[1]
    return self.pc, ("a value that no other thread or asynchronous operation will change "
                     "(it polls in a loop)")


def block(k, th) -> None:
  """``th`` now waits (``th.wait`` set, state "block"): registered with the scheduler."""
  k.blocked[th.slot] = th
  th.wait.on_block(k, th)


def block_all(k, threads, pc, wait) -> None:
  """``block`` of each of ``threads`` at ``pc`` with one shared ``wait`` (a warp's lanes
  at a barrier), in order."""
  blocked = k.blocked
  if type(wait).on_block is Wait.on_block:   # (nothing to do on blocking: at once)
    for th in threads:
      th.pc, th.state, th.wait = pc, "block", wait
    blocked.update((th.slot, th) for th in threads)
    return
  for th in threads:
    th.pc, th.state, th.wait = pc, "block", wait
    blocked[th.slot] = th
    wait.on_block(k, th)


def resume(k, th) -> None:
  """``th`` goes on after its wait: past its instruction (``Wait.advance``), runnable."""
  resume_all(k, (th,))


def resume_all(k, threads) -> None:
  """``resume`` of each of ``threads``, in order (the waiters a barrier releases)."""
  blocked, runnable, plain = k.blocked, k.runnable, Wait.on_resume
  for th in threads:
    wait = th.wait
    if type(wait).on_resume is not plain:   # (a barrier's hundreds of waiters: most
      wait.on_resume(k, th)                 # waits have nothing to do)
    del blocked[th.slot]
    th.pc, th.state, th.wait = th.pc + wait.advance, "run", None
    runnable.append(th)
