"""The checker's memory model: happens-before by vector clocks, a shadow of every
shared-memory byte (global memory's, with the same verdicts: ``global_memory``),
and asynchronous operations that land late.

Happens-before.  Every thread has a vector clock (``vc``) over *slots*: slot 0
is the initial contents of memory, slots 1..N the threads, and one slot per
mbarrier stands for the asynchronous data its phases make visible.  A release
(an mbarrier arrive, ``barrier.cluster.arrive``, ``bar.sync``, a fence followed
by a relaxed arrive) publishes the releasing thread's clock *with its CTA and
scope*; an acquire (a wait that observes the phase, ``barrier.cluster.wait``,
``bar.sync``, a fence after a relaxed wait) joins the published clocks whose
scopes make the pair morally strong: both scopes must include both threads
(PTX ISA, Memory Consistency Model, "Morally strong operations" and
"Synchronizes-with"), i.e. same CTA, or both scopes at least ``.cluster``.

Asynchronous data.  ``st.async`` / ``red.async`` (and their ``complete_tx``)
wait in a queue; a seeded ``schedule.Schedule`` decides when each lands and in which
order, so complete_tx may come before the matching ``expect_tx``.  Landed
bytes are stamped "barrier B, phase p": a thread may read them only once it has
observed that phase complete (any wait scope: the mbarrier's complete-tx
mechanism makes async-proxy writes visible to the threads that observe the
phase; upstream's hardware-tested kernels wait with ``.acquire.cta``).

The shadow of each SMEM byte (``shadow.Shadow``) holds its last plain write, every
atomic write and every read since (slot -> clock: full sets, so a later access
that is not ordered after *any* of them is reported whatever the interleaving),
how many asynchronous writes to it are in flight, and whether it belongs to an
initialised mbarrier (then only mbarrier operations may touch it).  A read or
write not ordered after the conflicting accesses is a finding (``findings.Finding``;
concurrent atomics do not conflict).  ``global_memory.GlobalShadow`` keeps the
same history for the bytes of the global buffers (no asynchronous writes, no
mbarriers there), a record per run of bytes accessed together.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np

__all__ = ["CLOCK", "Access", "CheckerError",
           "RULES", "WARNINGS", "SCOPES", "SEMS", "sem_scope", "Releases", "SCHEDULES",
           "CI_SCHEDULES", "SLOW_SCHEDULES",
           "morally_strong", "tags_morally_strong"]

# Each rule is named after the part of the PTX ISA that it enforces: the core's rules
# here, each family's added by the registry (``families.loaded``).
RULES = {
    "hang": "a barrier phase that can never complete (on hardware: a hang)",
    "race": "PTX ISA, Memory Consistency Model: conflicting accesses not ordered by "
            "causality order (a data race: a read may see the old or the new bytes; a "
            "write after a read it is not ordered after is a write-after-read)",
    "early-read": "PTX ISA, mbarrier / st.async: the destination of an asynchronous "
                  "store accessed before the thread observed the completion of the "
                  "mbarrier phase that tracks it (a write over such bytes that a thread "
                  "read since, unordered with that read, is a race: write-after-read)",
    "red.async-self": "PTX ISA, red.async: the destination shared memory and the "
                      "mbarrier must be in a CTA other than the executing thread's",
    "st.async-cluster-of-one": "PTX ISA, st.async/red.async: undefined in a cluster "
                               "of one CTA",
    "barrier-elsewhere": "PTX ISA, st.async/red.async: the destination and the mbarrier "
                         "must be in the same CTA",
    "arrival-overflow": "PTX ISA, mbarrier: more arrive-on operations than the phase's "
                        "pending arrival count",
    "tx-range": "PTX ISA, mbarrier: tx-count outside -(2^20-1) .. 2^20-1",
    "count-range": "PTX ISA, mbarrier.init: expected arrival count outside 1 .. 2^20-1",
    "barrier-init": "PTX ISA, mbarrier.init: an mbarrier used by a thread the "
                    "initialisation is not visible to (fence.mbarrier_init, "
                    "then a cluster barrier, for other CTAs)",
    "barrier-uninit": "PTX ISA, mbarrier: an mbarrier operation on memory that "
                      "mbarrier.init never initialised",
    "barrier-memory": "PTX ISA, mbarrier: an access other than an mbarrier operation to "
                      "the 8 bytes of an initialised mbarrier (undefined until "
                      "mbarrier.inval)",
    "barrier-reinit": "PTX ISA, mbarrier.init: performing mbarrier.init on a location "
                      "holding a valid mbarrier object is undefined (mbarrier.inval "
                      "it first)",
    "arrive-nocomplete": "PTX ISA, mbarrier.arrive: the behavior is undefined if an "
                         "arrive-on operation with .noComplete causes the mbarrier to "
                         "complete its current phase",
    "barrier-peer": "PTX ISA, mbarrier: only arrive operations, not *_wait, on an mbarrier "
                    "in another CTA (.shared::cluster forms, or a generic arrive whose state "
                    "is the sink _); another generic address outside the executing CTA's "
                    ".shared::cta window is undefined",
    "phase-overrun": "PTX ISA, mbarrier.test_wait/try_wait: the state or phaseParity must "
                     "name the current or the immediately preceding phase",
    "nc-written": "PTX ISA, ld.global.nc: loads \"via non-coherent cache\" (\"optionally "
                  "cache in non-coherent read-only cache\"): the bytes it reads must be "
                  "read-only for the whole kernel (CUDA Programming Guide, read-only data "
                  "cache); any write of the kernel to them is reported",
    "undefined-value": "PTX ISA, shfl.sync: \"results are undefined if a thread sources a "
                       "register from an inactive thread or a thread that is not in "
                       "membermask\": a store, address, branch, predicate or comparison "
                       "that uses such a value has no defined outcome",
    "collective-mask": "PTX ISA, shfl.sync / vote.sync / elect.sync / redux.sync / "
                       "match.sync / bar.warp.sync: the "
                       "behavior is undefined if the executing thread is not in the "
                       "membermask",
    "aligned-divergence": "PTX ISA, .aligned: all threads in the warp must execute the "
                          "same .aligned instruction (in conditionally executed code, only "
                          "if all threads evaluate the condition identically)",
    "barrier-count": "PTX ISA, bar / barrier: the thread count b \"must be a multiple "
                     "of the warp size\" (and positive)",
    "cluster-rearrive": "PTX ISA, barrier.cluster: \"Each thread must arrive at the barrier "
                        "only once before the barrier completes\"",
    "bar-red-mixed": "PTX ISA, bar / barrier: \"barrier{.cta}.red should not be intermixed "
                     "with barrier{.cta}.sync or barrier{.cta}.arrive using the same active "
                     "barrier. Execution in this case is unpredictable\"",
    "fault": "the kernel faults as it would on hardware: an access out of bounds, "
             "misaligned, or into a CTA the cluster does not have",
    "exit": "CUDA Programming Guide, distributed shared memory: every operation from "
            "another CTA into a CTA's shared memory or mbarriers (access, arrive, "
            "expect_tx, complete_tx) must happen before the target CTA exits (a relaxed "
            "flag or arrive orders nothing)",
    "proxy-fence": "PTX ISA, memory consistency model, proxies: accesses to one location "
                   "through different proxies need a proxy fence between them; "
                   "fence.proxy.async is the bidirectional fence between the generic and "
                   "the asynchronous proxy (a thread's st.shared, then a bulk or tensor "
                   "copy that reads those bytes: check/proxy.py)",
}
# Rules whose findings are warnings: the kernel breaks the ISA's letter (or a rule the
# checker keeps without a sentence of the ISA), yet widely used code relies on it.
# rule -> the evidence that it does (docs/checker.md, "Warnings").  ``strict`` makes
# them errors (``report.Report``); every other rule's findings are errors.  The
# families' warnings join this table when they load, as their rules join ``RULES``.
WARNINGS = {
    "exit-async-read": "upstream jax's Blackwell matmul (blackwell_matmul_mgpu, jax 0.12) "
                       "ends with wait_smem_to_gmem(1, wait_read_only=True): its last TMA "
                       "store may still read its CTA's shared memory when the CTA exits; "
                       "CUTLASS waits for all (tma_store_wait<0>) before exiting",
    "exit-relaxed": "upstream jax's collective Blackwell matmul ends with a remote "
                    "mbarrier.arrive into its peer, then barrier.cluster.arrive.relaxed and "
                    "barrier.cluster.wait; CUTLASS's kernels end with cute::cluster_arrive_"
                    "relaxed() + cluster_wait() to keep the peers alive, the same pattern",
    "peer-arrive-cta": "CUTLASS's ClusterBarrier::arrive(cta_id, pred) (mapa, then "
                       "mbarrier.arrive.shared::cluster.b64 with the default .release.cta: "
                       "the consumer release of every multicast TMA pipeline), Triton's "
                       "remote arrive_barrier and upstream Pallas' ClusterBarrier arrive "
                       "(jax's collective Blackwell matmul) all arrive at .cta scope on a "
                       "peer CTA's mbarrier; the ISA's own mbarrier.arrive example does "
                       "(mbarrier.arrive.release.cta.shared::cluster.b64 _, [remoteAddr32])",
    "proxy-fence-read": "CUTLASS's and Mosaic's pipelines refill a stage with a TMA load "
                        "after the threads' generic reads of it, ordered by the mbarrier "
                        "handshake alone (no fence.proxy.async); jax's interpret mode "
                        "reports this as a race, and DeepEP saw data corrupted without the "
                        "fence (docs/checker.md, \"Warnings\")",
}
RULES.update({
    "exit-relaxed": "CUDA Programming Guide, distributed shared memory (as the exit rule); "
                    "PTX ISA, barrier.cluster: \"The optional .relaxed qualifier on "
                    "barrier.cluster.arrive specifies that there are no memory ordering and "
                    "visibility guarantees provided for the memory accesses performed prior "
                    "to barrier.cluster.arrive\": a peer's operation ordered before the exit "
                    "only by a relaxed cluster barrier (execution order) is not ordered by "
                    "the letter",
    "peer-arrive-cta": "PTX ISA, mbarrier.arrive: \"The optional .scope qualifier indicates "
                       "the set of threads that directly observe the memory synchronizing "
                       "effect of this operation ... If the .scope qualifier is not specified "
                       "then it defaults to .cta\"; Memory Consistency Model, Scope: .cta is "
                       "\"The set of all threads executing in the same CTA as the current "
                       "thread\": a release arrive at .cta scope on another CTA's mbarrier "
                       "orders nothing for that CTA's threads (taken as ordered, with the "
                       "warning: .release.cluster, waited at .cluster scope, is clean)",
    "proxy-fence-read": "PTX ISA, memory consistency model, Proxies: \"A proxy fence is "
                        "required to synchronize memory operations across different "
                        "proxies\": a thread's generic read of shared memory, then a bulk or "
                        "tensor copy (asynchronous proxy) that writes those bytes, with no "
                        "fence.proxy.async between the read and the copy's issue "
                        "(check/proxy.py)",
    "exit-async-read": "the checker's exit rule (no sentence of the PTX ISA): an asynchronous "
                       "operation of the CTA itself (a bulk copy of its bulk group) still "
                       "reading the CTA's shared memory when the CTA exits, with no "
                       "cp.async.bulk.wait_group.read covering it: the memory may be given to "
                       "another CTA while it reads",
})

# The opcode families' own rules join this table when the families load
# (``families.loaded``: each family declares its rules with their sources), so it is
# complete before any kernel is compiled.

SCOPES = {"cta": 0, "cluster": 1, "gpu": 2, "sys": 3}
# The type of a vector clock's entries: 32 bits (a thread's clock counts its own events,
# far below 2**31 in any run the checker can finish), so that copying clocks (every
# asynchronous store keeps its issuer's) moves half the bytes of int64.
CLOCK = np.int32
TX_LIMIT = (1 << 20) - 1

# Schedule seeds (``schedule.Schedule`` says what each chooses).  CI runs every kernel
# under CI_SCHEDULES; the slow mode (``MAS_EMU_SLOW=1``) under SLOW_SCHEDULES.
CI_SCHEDULES = (0, 1, 2)
SLOW_SCHEDULES = tuple(range(24))
SCHEDULES = SLOW_SCHEDULES if os.environ.get("MAS_EMU_SLOW", "") not in ("", "0") else CI_SCHEDULES


# The .sem qualifiers of fences, mbarrier operations and barriers (memory
# operations add weak, volatile and mmio: strong.MEMORY_SEMS).
SEMS = ("release", "acquire", "acq_rel", "relaxed", "sc")


def sem_scope(mods, default_sem):
  """(semantics, scope rank) named by an opcode's qualifiers (default scope .cta)."""
  sem = next((m for m in mods if m in SEMS), default_sem)
  scope = next((SCOPES[m] for m in mods if m in SCOPES), SCOPES["cta"])
  return sem, scope


@dataclasses.dataclass(frozen=True)
class Access:
  """One side of a conflict, as data: ``who`` did it (in words: "CTA 0 thread 5", an
  asynchronous store with its issuer, or the asynchronous stores of an mbarrier
  phase), its ``cta`` / ``thread`` (None for asynchronous stores of a phase),
  ``kind`` ("read", "write", "strong read", "strong write", "asynchronous store",
  "asynchronous reduction"), ``memory`` (the bytes, e.g. "CTA 1 SMEM bytes 16..19";
  None where not known), and the instruction: ``ptx_line``, ``instruction`` (its
  text), ``source`` (the user's "file:line" from the PTX's line info, or None)."""

  who: str
  cta: int | None
  thread: int | None
  kind: str
  memory: str | None
  ptx_line: int | None
  instruction: str | None
  source: str | None = None


class CheckerError(Exception):
  """The checker itself failed (an unexpected exception in a handler or the scheduler):
  never a finding about the kernel.  ``check_ptx`` raises it, naming the CTA, thread,
  PTX line and instruction it was running; the original exception is its cause."""


def shown_source(source: str) -> str:
  """A "file:line" as messages show it: the file relative to the working folder when
  it lies in it (so that a report reads the same on every checkout)."""
  path, _, line = source.rpartition(":")
  try:
    relative = os.path.relpath(path) if os.path.isabs(path) else path
  except ValueError:   # another drive (Windows)
    relative = path
  return f"{path if relative.split(os.sep)[0] == os.pardir else relative}:{line}"


def tags_morally_strong(a, b) -> bool:
  """Whether two strong accesses, each tagged (CTA, scope rank, offset, bytes), are
  morally strong (PTX ISA, Memory Consistency Model, "Morally strong operations"):
  each one's scope includes the other's thread, and "if both are memory operations,
  then they overlap completely".  ``b`` None: a weak access, never."""
  return b is not None and a[2:] == b[2:] and morally_strong(a[0], a[1], b[0], b[1])


def morally_strong(rel_cta: int, rel_scope: int, acq_cta: int, acq_scope: int) -> bool:
  """Whether a release by a thread of ``rel_cta`` and an acquire by one of
  ``acq_cta`` have scopes that include each other."""
  return rel_cta == acq_cta or min(rel_scope, acq_scope) >= SCOPES["cluster"]


class Releases:
  """Clocks published by release operations, joined per (releasing CTA, scope)."""

  def __init__(self):
    self.by_origin: dict[tuple[int, int], np.ndarray] = {}

  def add(self, cta: int, scope: int, vc: np.ndarray) -> None:
    key = (cta, scope)
    have = self.by_origin.get(key)
    self.by_origin[key] = vc.copy() if have is None else np.maximum(have, vc)

  def merged(self, other: "Releases") -> "Releases":
    out = Releases()
    for src in (self, other):
      for (cta, scope), vc in src.by_origin.items():
        out.add(cta, scope, vc)
    return out

  def acquire_into(self, th, acq_scope: int) -> None:
    """Joins into ``th.vc`` what an acquire at ``acq_scope`` synchronises with;
    the rest goes to ``th.unscoped`` (to explain a later race)."""
    for (cta, scope), vc in self.by_origin.items():
      if morally_strong(cta, scope, th.cta, acq_scope):
        np.maximum(th.vc, vc, out=th.vc)
      else:
        np.maximum(th.unscoped, vc, out=th.unscoped)
        th.unscoped_pair = (scope, acq_scope)   # named by a later race report
