"""The runs of one check (every cluster of the grid under every schedule) in worker
processes, with the outcomes a sequential run gives.

A run is one cluster under one schedule.  The schedules of one cluster are independent
runs from the same arguments; a cluster's arguments are the previous cluster's carried
memory (``report._checked``: the first of its schedules, in seed order, that completed),
so a cluster's runs start as soon as that is decided: when its schedule 0 completes,
while the previous cluster's other schedules still run; when schedule 0 does not, once
the seeds before the first completed one have ended (the sequential rule, exactly).

The workers are forked children of this process, at most ``jobs``, each kept for run
after run of one check: the parsed kernel and the first cluster's arguments are already
in its memory; a later cluster's arguments are sent to a worker once (pickled, arrays that
several arguments share still shared); each run's outcome (a ``Launched`` or an
``Unfinished``) comes back.  A run's budget (``budget.Budget``) holds in its worker:
``jobs`` runs may hold ``jobs`` times ``max_memory_mb`` together.  The
outcomes are gathered in (cluster, seed) order: the findings, their order and the
outputs are those of ``jobs=1``.  Where a run raises (an opcode the checker refuses at
run time, the checker's own error), the exception of the earliest run in that order is
raised, as the sequential loop would raise it.

Fork is used on Linux only (macOS's system libraries are not fork-safe, Windows has no
fork), outside daemonic multiprocessing workers (which may have no children); elsewhere
every check runs its runs one after another, in this process.
"""

from __future__ import annotations

import collections
import gc
import os
import pickle
import sys
import traceback
import warnings

from mosaic_async_store.errors import refuse, refuse_type

__all__ = ["JOBS_VARIABLE", "cores", "default_jobs", "resolve_jobs", "grid_runs",
           "WorkerError"]

# The environment variable that sets the default of ``jobs`` (an int >= 1): a test suite
# that runs its own workers sets it to 1 (test/conftest.py does).
JOBS_VARIABLE = "MAS_CHECK_JOBS"


class WorkerError(RuntimeError):
  """A run's worker process failed in a way that has no exception of its own to
  re-raise here: it died before reporting, or raised an exception that cannot be
  pickled (its type, message and traceback are in the message)."""


def cores() -> int:
  """The CPU cores this process may run on."""
  if hasattr(os, "process_cpu_count"):   # (Python 3.13: the affinity's count)
    return max(1, os.process_cpu_count() or 1)
  if hasattr(os, "sched_getaffinity"):
    return max(1, len(os.sched_getaffinity(0)))
  return max(1, os.cpu_count() or 1)


def default_jobs() -> int:
  """``jobs`` when none is given: ``MAS_CHECK_JOBS`` where set; in a pytest-xdist worker,
  this machine's cores shared among the workers (so that the suite's own parallelism is
  not multiplied); else the cores."""
  set_to = os.environ.get(JOBS_VARIABLE)
  if set_to is not None:
    try:
      value = int(set_to)
    except ValueError:
      value = 0
    if value < 1:
      raise refuse(JOBS_VARIABLE, set_to, "an int >= 1 (worker processes per check)",
                   f"set {JOBS_VARIABLE}=1 (one run at a time) or unset it (the cores)")
    return value
  workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
  if workers.isdigit() and int(workers) > 0:
    return max(1, cores() // int(workers))
  return cores()


def resolve_jobs(jobs) -> int:
  """``jobs`` as an int >= 1 (None: ``default_jobs()``), or its refusal."""
  if jobs is None:
    return default_jobs()
  if isinstance(jobs, bool) or not isinstance(jobs, int):
    raise refuse_type("jobs", jobs, "an int >= 1 or None", "pass jobs=1 (one run at a "
                      "time, in this process) or leave it out (the machine's cores)")
  if jobs < 1:
    raise refuse("jobs", jobs, "an int >= 1 or None (the machine's cores)",
                 "pass jobs=1 (one run at a time, in this process) or more")
  return jobs


def _can_fork() -> bool:
  """Linux, and not inside a daemonic multiprocessing worker (which may have no
  children)."""
  if not (sys.platform.startswith("linux") and hasattr(os, "fork")):
    return False
  import multiprocessing
  return not multiprocessing.current_process().daemon


def grid_runs(launch, firsts, schedules: int, args: list, carried, jobs: int = 1):
  """Runs ``launch(arguments, first, seed)`` for each cluster's first CTA in ``firsts``
  (in order) and each seed ``0 .. schedules - 1``; a cluster's arguments are ``args`` for
  the first, then ``carried(arguments, outcomes)`` of the one before (``outcomes``: its
  runs' outcomes in seed order, None for one not yet ended; ``carried`` gives None while
  they do not decide it yet).  Returns (each cluster's outcomes, in seed order; the
  arguments after the last cluster).  ``jobs``: runs at a time, each in a forked worker
  (1, one schedule and one cluster, or a system without fork: in this process, one after
  another)."""
  if jobs == 1 or len(firsts) * schedules == 1 or not _can_fork():
    grid, current = [], args
    for first in firsts:
      outcomes = [launch(current, first, seed) for seed in range(schedules)]
      grid.append(outcomes)
      current = carried(current, outcomes)
    return grid, current
  return _Workers(launch, firsts, schedules, args, carried, jobs).run()


class _Workers:
  """``grid_runs`` over at most ``jobs`` forked workers, each running one run at a time
  and kept for the next (its heap, grown by one run, serves the next): a queue of
  (cluster, seed) runs whose arguments are decided."""

  def __init__(self, launch, firsts, schedules, args, carried, jobs):
    import multiprocessing
    self.context = multiprocessing.get_context("fork")
    self.launch, self.firsts, self.carried, self.jobs = launch, firsts, carried, jobs
    self.schedules = schedules
    self.inputs = [args]                 # each decided cluster's arguments, in order
    self.outcomes = [[None] * schedules for _ in firsts]
    self.raised = {}                     # (cluster, seed) -> what its run raised
    self.queue = collections.deque((0, seed) for seed in range(schedules))
    self.idle = []                       # workers waiting for a run
    self.running = {}                    # a worker's connection -> ((cluster, seed), worker)

  def run(self):
    from multiprocessing.connection import wait
    try:
      while True:
        self._start_queued()
        if not self.running:
          break
        for connection in wait(list(self.running)):
          if connection in self.running:   # (not a run ended for an earlier one's raise)
            self._collect(connection)
        self._decide()
      if self.raised:   # (a run's own exception: never a finding, which runs return)
        worker_raised = self.raised[min(self.raised)]
        raise worker_raised
      return self.outcomes, self.inputs[-1]
    finally:
      for worker in self.idle + [worker for _, worker in self.running.values()]:
        worker.end()

  def _start_queued(self) -> None:
    first_raised = min(self.raised, default=None)
    while self.queue and len(self.running) < self.jobs:
      task = self.queue.popleft()
      if first_raised is not None and task > first_raised:
        continue   # (the sequential loop would have stopped before it)
      worker = self.idle.pop() if self.idle else self._forked()
      cluster, seed = task
      if worker.cluster != cluster:   # (a cluster's arguments go to a worker once)
        worker.connection.send(("arguments", cluster, self.inputs[cluster],
                                self.firsts[cluster]))
        worker.cluster = cluster
      worker.connection.send(("run", seed))
      self.running[worker.connection] = (task, worker)

  def _forked(self) -> _Worker:
    """A new worker, holding the first cluster's arguments (in its copy of memory)."""
    mine, its = self.context.Pipe(duplex=True)
    process = self.context.Process(target=_serve, args=(its, self.launch, self.inputs[0],
                                                        self.firsts[0]), daemon=True)
    # The child runs only the checker (Python and NumPy), never code that shares a lock
    # with the threads jax may have started here: Python's and jax's warnings about
    # forking a threaded process do not apply.  A frozen heap is not walked by the
    # child's collector, so its pages stay shared.
    gc.freeze()
    try:
      with warnings.catch_warnings():
        warnings.filterwarnings("ignore", r".*multi-?threaded", DeprecationWarning)
        warnings.filterwarnings("ignore", r"os\.fork\(\) was called", RuntimeWarning)
        process.start()
    finally:
      gc.unfreeze()
    its.close()
    return _Worker(process, mine, cluster=0)

  def _collect(self, connection) -> None:
    task, worker = self.running.pop(connection)
    try:
      kind, value = connection.recv()
    except (EOFError, OSError):
      worker.end()
      kind, value = "raised", self._died(task, worker.process.exitcode)
    else:
      self.idle.append(worker)
    if kind == "done":
      self.outcomes[task[0]][task[1]] = value
      return
    self.raised[task] = value
    for other, (later, running) in list(self.running.items()):   # (runs past it: moot)
      if later > min(self.raised):
        running.end()
        del self.running[other]

  def _decide(self) -> None:
    """Starts the next cluster's runs once its arguments are decided."""
    while len(self.inputs) <= len(self.firsts):
      cluster = len(self.inputs) - 1
      following = self.carried(self.inputs[cluster], self.outcomes[cluster])
      if following is None:
        return
      self.inputs.append(following)
      if cluster + 1 < len(self.firsts):
        self.queue.extend((cluster + 1, seed) for seed in range(self.schedules))

  def _died(self, task, exitcode) -> WorkerError:
    cluster, seed = task
    how = (f"signal {-exitcode} (9: killed, as the system does when memory runs out)"
           if exitcode is not None and exitcode < 0 else f"exit status {exitcode}")
    return WorkerError(
        f"jobs={self.jobs}: the worker running schedule {seed} of the cluster from CTA "
        f"{self.firsts[cluster]} ended with {how} before it reported; allowed: a run "
        "that ends in its worker; fix: pass jobs=1 (the runs one at a time, in this "
        "process, where a run past its memory budget stops as unfinished) or a smaller "
        "Budget(max_memory_mb=...)")


class _Worker:
  """A forked worker: its process, the connection to it, and the cluster whose
  arguments it holds."""

  def __init__(self, process, connection, cluster: int):
    self.process, self.connection, self.cluster = process, connection, cluster

  def end(self) -> None:
    self.connection.close()
    self.process.kill()
    self.process.join()


def _serve(connection, launch, arguments, first) -> None:
  """A worker's body: runs until its connection closes, each ("run", seed) answered
  with that run's outcome (or what it raised); ("arguments", cluster, arguments,
  first) sets the cluster the next runs run."""
  while True:
    try:
      message = connection.recv()
    except (EOFError, OSError):
      return
    if message[0] == "arguments":
      _, _, arguments, first = message
      continue
    seed = message[1]
    try:
      result = ("done", launch(arguments, first, seed))
    except BaseException as e:   # (re-raised by the parent, in the sequential order)
      result = ("raised", _portable(e, first, seed))
    try:
      connection.send(result)
    except Exception as e:   # an outcome that does not pickle: the checker's own fault
      connection.send(("raised", WorkerError(
          f"the outcome of schedule {seed} of the cluster from CTA {first} could not be "
          f"sent back: {type(e).__name__}: {e}")))


def _portable(e: BaseException, first, seed) -> BaseException:
  """``e`` as the parent can re-raise it: itself where it pickles (with the worker's
  traceback as a note, but for a refusal, whose message says all), else a
  ``WorkerError`` naming it."""
  told = "".join(traceback.format_exception(type(e), e, e.__traceback__))
  try:
    pickle.loads(pickle.dumps(e))
  except Exception:
    return WorkerError(f"schedule {seed} of the cluster from CTA {first} raised "
                       f"{type(e).__name__}: {e} (not picklable; in the worker:\n{told})")
  if not isinstance(e, NotImplementedError) and hasattr(e, "add_note"):
    e.add_note(f"(raised in the worker process running schedule {seed} of the cluster "
               f"from CTA {first}:\n{told})")
  return e
