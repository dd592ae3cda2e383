"""The seeded choices of a PTX checker run (``Schedule``), which ``run`` and the
instruction families ask: which thread runs next, whether a piece pauses after a
synchronising instruction, which lane ``elect.sync`` elects, when asynchronous
operations land.

Seed 0: every thread runs until it blocks and every asynchronous operation lands
at once, in issue order; 1: threads interleave at random and operations land as
late as possible, newest first; others: random interleaving, operations landing
at random moments in random order.  ``memory.CI_SCHEDULES`` / ``SLOW_SCHEDULES``
are the seeds the tests run.

Systematic in every schedule (the choices a protocol's verdict must not rest on, taken
the adversarial way instead of left to a seed; ``run``'s doc says how):

* a poller runs late: a thread whose last step was a poll (a wait that returned false,
  a spin: ``Thread.polled``) runs only when no other thread can, and one whose poll
  waits for an mbarrier phase it did not arrive in (an observer) after those
  (``pick_thread``); a blocked ``mbarrier.try_wait`` whose phase completed resumes only
  then (``waits.Wait.observes_late``), so an observer sees a phase as late as any
  execution does and the arrivals of the next phases come as early as they can (a
  waiter that two phases can pass is ``phase-overrun``);
* an asynchronous operation whose landing would complete an mbarrier phase stays in
  flight while the thread that issued it can still run (it may issue more on that
  barrier), and where another one in flight could complete that phase instead, a launch
  also runs the kernel with that one first (``landing_orders``);
* where another thread's arrival could complete an mbarrier phase instead of the one
  that did, a launch also runs the kernel with the completing thread held back
  (``arrival_orders``).

Seed 0's "at once" therefore holds for an operation that completes a phase once its
issuer stopped running.
"""

from __future__ import annotations

import random

__all__ = ["Schedule"]


class Schedule:
  """Seeded choices: which thread runs next, whether a piece (the lanes of a warp
  running together) pauses after a synchronising instruction, when asynchronous
  operations land."""

  def __init__(self, seed: int):
    self.seed, self.rng = seed, random.Random(seed)
    self.land_p = self.rng.choice((0.05, 0.2, 0.5)) if seed >= 2 else None
    self.yield_p = 0.0 if seed == 0 else 0.5
    self._step, self._pause = None, False   # (pauses: the choice of the last step)

  def pick_index(self, n: int) -> int:
    """Which of ``n`` runnable threads runs next."""
    return 0 if self.seed == 0 else self.rng.randrange(n)

  def pauses(self, step: int) -> bool:
    """Whether the lanes that run instruction step ``step`` (``Machine.step``: one
    instruction of one piece) pause after it, a synchronising instruction: one choice
    per step, so a piece pauses or goes on whole, whether its lanes ran the
    instruction through its warp form or one by one."""
    if step != self._step:
      self._step = step
      self._pause = self.yield_p > 0 and self.rng.random() < self.yield_p
    return self._pause

  def pick_thread(self, runnable: list, late: dict) -> int:
    """The index in ``runnable`` (threads) of the one that runs next: ``pick_index``'s
    choice among those of the lowest class (``late``: slot -> class of the threads whose
    last step was a poll, ``run``'s doc; 0 for the others)."""
    if late:
      classes = [late.get(th.slot, 0) for th in runnable]
      lowest = min(classes)
      first = [i for i, c in enumerate(classes) if c == lowest]
      if len(first) < len(runnable):
        return first[self.pick_index(len(first))]
    return self.pick_index(len(runnable))

  def pick_leader(self, n: int) -> int:
    """Which of ``n`` lanes (in lane order) ``elect.sync`` elects: the ISA leaves it
    to the hardware, so schedule 0 takes the lowest, 1 the highest, others any."""
    return 0 if self.seed == 0 else n - 1 if self.seed == 1 else self.rng.randrange(n)

  def landing_now(self, inflight: list) -> list:
    """The in-flight operations that land now, while threads can still run."""
    if self.seed == 0:
      return list(inflight)
    if self.seed == 1 or not inflight or self.rng.random() >= self.land_p:
      return []
    k = self.rng.randint(1, min(len(inflight), 8))
    return [inflight[i] for i in self.rng.sample(range(len(inflight)), k)]

  def landing_when_stuck(self, inflight: list):
    """The one operation that lands when no thread can run."""
    return inflight[-1] if self.seed == 1 else self.rng.choice(inflight)
