"""Fences of the PTX checker: ``fence`` (by ``.sem`` and ``.scope``, the
``.sync_restrict`` forms, ``fence.mbarrier_init``, ``fence.proxy.async``) and
``membar``, each with its memory-ordering effect on the executing thread's clocks
(what a later relaxed arrive releases, what earlier relaxed waits acquire).
Functions of the machine ``k`` (``machine.Machine``); every qualifier is checked
against the ISA's grammar first (``_fence_op``).
"""

from __future__ import annotations

import numpy as np

from mosaic_async_store.check import program, proxy
from mosaic_async_store.check.memory import SCOPES, sem_scope
from mosaic_async_store.check.family import Family
from mosaic_async_store.check.opcodes import Opcode, check_qualifiers
from mosaic_async_store.check.slots import MBARRIER_INIT

__all__ = ["OPCODES", "FAMILY"]

_MEMBAR_SCOPE = {"cta": "cta", "gl": "gpu", "sys": "sys"}
_FENCE = {"sem": {"sc", "acq_rel", "acquire", "release"}, "scope": set(SCOPES),
          "restriction": {"sync_restrict::shared::cta", "sync_restrict::shared::cluster"}}
# The uni-directional proxy fences from the generic to the asynchronous proxy (PTX ISA,
# membar/fence: the only two forms of ``fence.proxy.async::generic``), each a half of the
# pair ``proxy.release_to_async`` / ``proxy.acquire_to_async`` say what orders.
_GENERIC_TO_ASYNC = {
    ("proxy", "async::generic", "release", "sync_restrict::shared::cta", "cluster"):
        proxy.release_to_async,
    ("proxy", "async::generic", "acquire", "sync_restrict::shared::cluster", "cluster"):
        proxy.acquire_to_async}
_PROXY_FENCES = [["proxy", "async"], ["proxy", "async", "global"],
                 ["proxy", "async", "shared::cta"], ["proxy", "async", "shared::cluster"]]


def _fence_op(k, ins):
  """fence / membar, once their qualifiers are checked against the ISA's grammar (a
  fence names a scope; membar one of .cta, .gl, .sys); anything else is refused."""
  mods = ins.mods
  if ins.base == "membar":
    if len(mods) != 1 or mods[0] not in _MEMBAR_SCOPE:
      raise NotImplementedError(f"opcode {ins.opcode} (membar takes one of .cta, .gl, .sys)")
  elif mods[:1] == ["proxy"]:
    half = _GENERIC_TO_ASYNC.get(tuple(mods))
    if half is not None:
      return program.each_lane(lambda th: half(k, th))
    if mods not in _PROXY_FENCES:
      raise NotImplementedError(f"opcode {ins.opcode} (the proxy fences the checker runs: "
                                "fence.proxy.async{.global, .shared::cta, .shared::cluster} "
                                "and fence.proxy.async::generic.release.sync_restrict::"
                                "shared::cta.cluster / .acquire.sync_restrict::shared::"
                                "cluster.cluster)")
  elif mods[:1] != ["mbarrier_init"]:
    if "scope" not in check_qualifiers(ins, _FENCE, "fence"):
      raise NotImplementedError(f"opcode {ins.opcode} (a fence names its .scope)")
  return _fence(k, ins.base, mods)


def _fence(k, base, mods):
  """The fences, by their ``.sem`` (PTX ISA, membar/fence): ``.acquire`` acquires
  what earlier relaxed waits observed; ``.release`` lets later relaxed arrives
  release this thread's earlier accesses; ``.acq_rel`` (the default), ``.sc``
  and ``membar`` do both, and ``.sc`` / ``membar`` ("a synonym for fence.sc", PTX ISA)
  also synchronise with every earlier morally strong one: Fence-SC order, the run's
  order (``k.sc_fences``: their clocks), which bounds how stale a strong read after
  them may be (strong.py).  ``.sync_restrict::shared::cta`` (release only) orders
  only operations on the thread's own CTA's shared memory: accesses it made to
  other CTAs' shared memory are left out of what it releases (from the first
  such access on: conservative).  ``.sync_restrict::shared::cluster`` (acquire
  only) covers all shared memory.  A thread's clock does not tell state spaces
  apart, so both also order its global-memory accesses (a limit: a global race
  ordered only by such a fence is not reported).
  ``fence.mbarrier_init.release.cluster`` releases the thread's earlier
  ``mbarrier.init``s and nothing else.  ``fence.proxy.async{.space}`` orders the
  generic and the asynchronous proxy (``proxy.fence``: what a bulk copy may read); the
  uni-directional ``fence.proxy.async::generic.{release,acquire}.sync_restrict...``
  pair orders the generic proxy before the asynchronous one (``proxy.release_to_async``
  / ``acquire_to_async``, from ``_fence_op``); every other proxy fence is refused
  (``_fence_op``)."""
  if mods and mods[0].startswith("proxy"):
    space = mods[2] if len(mods) > 2 else None
    return program.with_lanes(lambda th: proxy.fence(k, th, space),
                              lambda lanes: proxy.fence_lanes(k, lanes, space))
  restrict = next((m for m in mods if m.startswith("sync_restrict")), None)
  if mods and mods[0] == "mbarrier_init":
    if mods[1:] != ["release", "cluster"]:
      raise NotImplementedError(f"opcode fence.{'.'.join(mods)}")
    scope, acquire, release = SCOPES["cluster"], False, "inits"
    sc = False
  elif base == "membar":   # membar.cta / .gl / .sys: fence.sc.cta / .gpu / .sys
    scope, acquire, release = SCOPES[_MEMBAR_SCOPE[mods[0]]], True, "all"
    sc = True
  else:
    sem, scope = sem_scope([m for m in mods if m != restrict], "acq_rel")
    if (restrict, sem) not in ((None, "acq_rel"), (None, "sc"), (None, "acquire"),
                               (None, "release"), ("sync_restrict::shared::cta", "release"),
                               ("sync_restrict::shared::cluster", "acquire")):
      raise NotImplementedError(f"opcode fence.{'.'.join(mods)}")
    acquire, sc = sem != "release", sem == "sc"
    release = None if sem == "acquire" else (
        "own-cta" if restrict == "sync_restrict::shared::cta" else "all")
  def fence(th):
    init_slots = k.slots.indices(MBARRIER_INIT)
    if acquire:
      for rec, wscope, data_slot, phase in th.pending_obs:
        # the observed phase's asynchronous data (in this CTA; None: a relaxed
        # strong read, see strong.py), then its releases
        if data_slot is not None:
          th.vc[data_slot] = max(th.vc[data_slot], phase)
        rec.acquire_into(th, min(scope, wscope))
      th.pending_obs.clear()
    if sc:   # Fence-SC order: the run's order; each earlier fence.sc synchronises with
      order = k.sc_fences   # this one where morally strong (their clocks, by CTA and
      order.acquire_into(th, scope)   # scope)
      order.add(th.cta, scope, th.vc)
    if release == "inits":
      vc = np.zeros_like(th.vc)
      vc[init_slots] = th.vc[init_slots]
      th.fence_rel = (vc, scope)
    elif release == "own-cta":
      vc = th.vc.copy()
      if th.remote_since is not None:
        vc[th.slot] = min(vc[th.slot], th.remote_since - 1)
      th.fence_rel = (vc, scope)
    elif release == "all":
      th.fence_rel = (th.vc.copy(), scope)
    th.vc[th.slot] += 1
  if release == "inits":   # (fence.mbarrier_init: no acquire, not .sc)
    return program.with_lanes(fence, lambda lanes: _init_fence_lanes(k, lanes, scope))
  return program.each_lane(fence)


def _init_fence_lanes(k, lanes, scope):
  """``fence.mbarrier_init.release.cluster`` by each of ``lanes`` (threads of one warp,
  in lane order) at once: what each releases is its clock's entries for the mbarrier
  initialisations (rows of one new array), then its own slot ticks."""
  rows, init_slots = k.lane_rows(lanes), k.slots.indices(MBARRIER_INIT)
  released = np.zeros((len(lanes), k.clocks.shape[1]), k.clocks.dtype)
  released[:, init_slots] = k.clocks[np.ix_(rows, init_slots)]
  for th, vc in zip(lanes, released):
    th.fence_rel = (vc, scope)
  k.tick(rows)


# The opcodes this family runs (``opcodes.Opcode``: the handler, statements it runs,
# statements it refuses; test/checker/test_opcode_table.py compiles every one).
OPCODES = {
    "fence": Opcode(_fence_op, ("fence.acq_rel.cta", "fence.sc.cluster", "fence.acquire.cluster",
                                "fence.release.cluster", "fence.mbarrier_init.release.cluster",
                                "fence.proxy.async.shared::cta",
                                "fence.proxy.async::generic.release.sync_restrict::shared::cta"
                                ".cluster",
                                "fence.proxy.async::generic.acquire.sync_restrict::shared::"
                                "cluster.cluster",
                                "fence.release.sync_restrict::shared::cta.cluster",
                                "fence.acquire.sync_restrict::shared::cluster.cluster"),
                    ("fence.mbarrier_init.cluster", "fence.acquire.sync_restrict::shared::cta.cluster",
                     "fence.acq_rel", "fence.foo.cta", "fence.acq_rel.release.cta",
                     "fence.proxy.tensormap::generic.release.gpu", "fence.proxy.alias",
                     "fence.proxy.async::generic.release.sync_restrict::shared::cluster"
                     ".cluster",
                     "fence.proxy.async::generic.acquire.sync_restrict::shared::cta.cluster",
                     "fence.proxy.async::generic.release.cluster")),
    "membar": Opcode(_fence_op, ("membar.cta", "membar.gl", "membar.sys"), ("membar.foo",)),
}

FAMILY = Family("fences", OPCODES)
