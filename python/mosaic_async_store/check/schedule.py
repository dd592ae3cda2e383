"""The seeded choices of a PTX checker run (``Schedule``), which ``run`` and the
instruction families ask: which thread runs next, whether a piece pauses after a
synchronising instruction, which lane ``elect.sync`` elects, when asynchronous
operations land.

Seed 0: every thread runs until it blocks and every asynchronous operation lands
at once, in issue order; 1: threads interleave at random and operations land as
late as possible, newest first; others: random interleaving, operations landing
at random moments in random order.  ``memory.CI_SCHEDULES`` / ``SLOW_SCHEDULES``
are the seeds the tests run.
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
