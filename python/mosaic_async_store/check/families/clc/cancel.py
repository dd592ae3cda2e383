"""The handlers of cluster launch control: ``clusterlaunchcontrol.try_cancel`` (an
asynchronous 16-byte write of the response, completing on an mbarrier) and
``clusterlaunchcontrol.query_cancel`` (decoding the response from a ``.b128`` register).

The checker runs each cluster of a grid alone (``run.launch``), after or before the
others, never beside them, so when a request is made no other cluster is waiting to be
launched that the run could hand over: the only response it can give exactly is
"failed" (``NOT_CANCELED``), which is also a legal one on hardware ("It asynchronously
writes an opaque response to shared memory indicating whether the operation succeeded or
failed", PTX ISA, clusterlaunchcontrol.try_cancel).  A kernel whose loop takes the
failure as "no work left" is therefore run down its last iteration's path, as every
cluster of a fully occupied GPU would be.

What runs, all exactly:

  * ``clusterlaunchcontrol.try_cancel.async{.shared::cta}.mbarrier::complete_tx::bytes
    {.multicast::cluster::all}.b128 [addr], [mbar]``: "the response is asynchronously
    written using weak async-proxy writes to the corresponding local shared memory addr of
    each CTA in the requesting cluster. The completion of the writes to addr of a
    particular CTA is signaled via a complete-tx operation to the mbarrier object on the
    shared memory of that CTA" (with ``.multicast::cluster::all``; without it, the
    executing CTA's only).  Each CTA's write is one asynchronous operation
    (``CancelOp``, the interface of ``asyncops.AsyncOp``) whose 16 bytes are in flight
    from the issue (a thread touching them before it observes the completion is reported,
    as for any asynchronous write) and land when the schedule says, then complete-tx of 16
    bytes on that CTA's mbarrier ("with completeCount argument equal to amount of data
    stored in bytes").  The write is an asynchronous-proxy write: over bytes a thread last
    wrote it needs a proxy fence (``proxy.check_source``).  It does not arrive on the
    mbarrier (the ISA's example arrives with ``expect_tx`` itself).  Both addresses must be
    in the executing CTA's ``.shared::cta`` window ("The result is undefined if any of
    address operands do not fall within the address window of .shared::cta": a fault).
  * ``clusterlaunchcontrol.query_cancel.is_canceled.pred.b128 p, response``: false
    ("If the cluster is canceled successfully, predicate p is set to true; otherwise, it
    is set to false").
  * ``clusterlaunchcontrol.query_cancel.get_first_ctaid{.v4,::x,::y,::z}.b32.b128``: "If
    the request fails the behavior of clusterlaunchcontrol.query_cancel.get_first_ctaid
    is undefined", so every destination receives an ``undefined.Undefined`` value, which
    is the finding ``undefined-value`` wherever its bits are used (a guarded query that
    does not run, as jax's ``@p`` one, writes nothing).

The rules (``rules``): a query of a value no try_cancel wrote (``clc-response``), a
try_cancel by a CTA that decoded a failed response before (``clc-after-failure``), a
multicast request with an exited CTA in the cluster (``clc-exited``).
"""

from __future__ import annotations

from mosaic_async_store.check import access_core, addresses, asyncops, findings, program, proxy
from mosaic_async_store.check.families.clc import rules
from mosaic_async_store.check.findings import Finding, Stop, fault
from mosaic_async_store.check.opcodes import Opcode
from mosaic_async_store.check.ops import UNDEFINED
from mosaic_async_store.check.outcomes import YIELD
from mosaic_async_store.check.undefined import Undefined

__all__ = ["OPCODES", "NOT_CANCELED", "CancelOp"]

# The response of a failed request, as the 16 bytes land (little-endian): the ISA calls the
# response opaque, so any fixed value is one; this one reads as what it says in a dump.
NOT_CANCELED = int.from_bytes(b"clc:not-canceled", "little")
_BYTES = 16

# The forms of try_cancel (PTX ISA, its syntax: ".async{.space}.completion_mechanism
# {.multicast::cluster::all}.b128", .space = .shared::cta) -> (space, multicast).
_TRY = {("try_cancel", "async", *space, "mbarrier::complete_tx::bytes", *cast, "b128"):
        ("shared::cta" if space else None, bool(cast))
        for space in ((), ("shared::cta",)) for cast in ((), ("multicast::cluster::all",))}
# The forms of query_cancel -> what it extracts.
_QUERY = {("query_cancel", "is_canceled", "pred", "b128"): "is_canceled",
          ("query_cancel", "get_first_ctaid", "v4", "b32", "b128"): "ctaid",
          **{("query_cancel", f"get_first_ctaid::{d}", "b32", "b128"): "ctaid"
             for d in "xyz"}}
_UNDEFINED_CTAID = ("clusterlaunchcontrol.query_cancel.get_first_ctaid of a failed "
                    "request: \"If the request fails the behavior of clusterlaunchcontrol."
                    "query_cancel.get_first_ctaid is undefined\"")


class CancelOp:
  """One CTA's response to a ``try_cancel`` in flight: 16 bytes at ``off`` of CTA
  ``cta``'s shared memory, completing on its mbarrier at ``mbar_off`` (the interface of
  ``asyncops.AsyncOp``, with a landing of its own that checks the write as an
  asynchronous-proxy access: ``fenced``, the proxy fences before the issue)."""

  __slots__ = ("th", "vc", "insn", "opcode", "writes", "reads", "proxy", "completion",
               "idx", "fenced")

  def __init__(self, th, insn, opcode, cta, off, mbar_off):
    self.th, self.insn, self.opcode, self.vc = th, insn, opcode, th.vc.copy()
    self.writes = [asyncops.Write(cta, off, _BYTES, [NOT_CANCELED], None)]
    self.reads, self.proxy, self.idx = (), "async", None
    self.completion = asyncops.MbarrierTx((cta, mbar_off), _BYTES)
    self.fenced = None   # (proxy.fenced: set at issue)

  @property
  def ctas(self) -> set:
    """The CTAs whose shared memory it still touches (the exit rule)."""
    return {self.writes[0].cta, self.completion.cta}

  @property
  def text(self) -> str:
    return (f"CTA {self.th.cta} thread {self.th.tid}: {self.opcode} into CTA "
            f"{self.writes[0].cta}")

  def land(self, k):
    """The response lands (``asyncops.land``): checked and recorded as an
    asynchronous-proxy write, written, then complete-tx on the mbarrier."""
    asyncops.dequeue(k, self)
    w = self.writes[0]
    k.shadow[w.cta].mark_inflight_writes(self.writes, -1)
    try:
      slot, clock = self.completion.stamp(k, self)
      access_core.check_and_record(k, self, self.vc, w.cta, w.off, _BYTES, write=True,
                                   stamp=(slot, clock, self.insn), proxy_kind="async")
    except Stop as e:
      raise asyncops.at_issue(k, self, e) from None
    if k.unplaced:   # (a race: reported; the response lands all the same)
      findings.place_landing(k, self)
    access_core.write_values(k, k.smem[w.cta], w.off, _BYTES, [NOT_CANCELED], None,
                             weak=True)
    self.completion.complete(k, self)


def _own_shared(k, th, space, addr, n, operand):
  """The offset in ``th``'s own CTA's shared memory of try_cancel's ``operand`` at
  ``addr`` (``space``: "shared::cta", or None: a generic address); any other place is a
  fault ("The result is undefined if any of address operands do not fall within the
  address window of .shared::cta")."""
  buf, off = addresses.mem(k, th, space, addr, n)   # (alignment, bounds: faults there)
  if buf is not k.smem[th.cta] or addr >> 24:
    raise fault(f"CTA {th.cta} thread {th.tid}: clusterlaunchcontrol.try_cancel's {operand} "
                f"{addr:#x} is not in the executing CTA's .shared::cta window")
  return off


def _try_cancel(k, ins):
  """``clusterlaunchcontrol.try_cancel`` (the module doc): a ``CancelOp`` per CTA it
  writes, each issued through ``asyncops.issue``."""
  form = _TRY.get(tuple(ins.mods))
  if form is None or len(ins.ops) != 2 or any(o[0] != "addr" for o in ins.ops):
    raise NotImplementedError(f"opcode {ins.opcode} (not a form of clusterlaunchcontrol."
                              "try_cancel: .async{.shared::cta}.mbarrier::complete_tx::bytes"
                              "{.multicast::cluster::all}.b128 [addr], [mbar])")
  space, multicast = form
  addr, mbar, insn, name = ins.src[0], ins.src[1], len(k.program.code), ins.opcode

  def try_cancel(th):
    off = _own_shared(k, th, space, addr(th), _BYTES, "addr")
    mbar_off = _own_shared(k, th, space, mbar(th), 8, "mbar")
    if th.cta in k.clc_failed:
      raise Stop(Finding(rules.AFTER_FAILURE, f"CTA {th.cta} thread {th.tid} issues "
                         "clusterlaunchcontrol.try_cancel after its CTA decoded a failed "
                         "response (clusterlaunchcontrol.query_cancel.is_canceled false)"))
    targets = range(len(k.smem)) if multicast else (th.cta,)
    gone = [r for r in targets if k.exited[r]]
    if gone:
      raise Stop(Finding(rules.EXITED, f"CTA {th.cta} thread {th.tid} issues {name} while "
                         f"CTA {gone[0]} of its cluster has exited"))
    for r in targets:
      op = CancelOp(th, insn, name, r, off, mbar_off)
      op.fenced = proxy.fenced(k, op.vc)
      asyncops.issue(k, th, op)
      if r != th.cta and th.remote_since is None:   # (fences.py: .sync_restrict)
        th.remote_since = int(th.vc[th.slot])
    return YIELD if k.sched.pauses(k.step) else None
  return try_cancel


def _shown(v) -> str:
  if type(v) is not int:
    return "an undefined value"
  if v == UNDEFINED:
    return "a register never written"
  return f"{v:#x}"


def _query_cancel(k, ins):
  """``clusterlaunchcontrol.query_cancel`` (the module doc): the response in a register
  must be one a try_cancel wrote (``NOT_CANCELED``: the only one the checker gives)."""
  what = _QUERY.get(tuple(ins.mods))
  dests = [] if not ins.ops else ins.ops[0][1] if ins.ops[0][0] == "vec" else [ins.ops[0]]
  vector = "v4" in ins.mods
  if what is None or len(ins.ops) != 2 or ins.ops[1][0] != "reg" or \
     (ins.ops[0][0] == "vec") != vector or len(dests) != (4 if vector else 1) or \
     any(d[0] not in ("reg", "sink") for d in dests) or \
     (what == "is_canceled" and dests[0][0] != "reg"):
    raise NotImplementedError(f"opcode {ins.opcode} (not a form of clusterlaunchcontrol."
                              "query_cancel: .is_canceled.pred.b128 p, r; .get_first_ctaid"
                              ".v4.b32.b128 {x, y, z, _}, r; .get_first_ctaid::{x,y,z}"
                              ".b32.b128 d, r)")
  value, name = ins.src[1], ins.opcode
  puts = [program.setter(k, d, 1 if what == "is_canceled" else 32) for d in dests]

  def query(th):
    v = value(th)
    if type(v) is not int or v != NOT_CANCELED:
      raise Stop(Finding(rules.RESPONSE, f"CTA {th.cta} thread {th.tid}: {name} decodes "
                         f"{_shown(v)}, which is no response of clusterlaunchcontrol."
                         "try_cancel (read the response only once its mbarrier phase "
                         "completed)"))
    if what == "is_canceled":
      k.clc_failed.add(th.cta)   # (rules.AFTER_FAILURE: this CTA observed the failure)
      puts[0](th, 0)
      return
    for put in puts:
      put(th, Undefined(_UNDEFINED_CTAID))
  return query


def _clusterlaunchcontrol(k, ins):
  if ins.mods[:1] == ["try_cancel"]:
    return _try_cancel(k, ins)
  if ins.mods[:1] == ["query_cancel"]:
    return _query_cancel(k, ins)
  raise NotImplementedError(f"opcode {ins.opcode} (clusterlaunchcontrol runs try_cancel and "
                            "query_cancel)")


# The opcodes this family runs (``opcodes.Opcode``: the handler, statements it runs,
# statements it refuses; test/checker/test_opcode_table.py compiles every one).
OPCODES = {
    "clusterlaunchcontrol": Opcode(_clusterlaunchcontrol, (
        "clusterlaunchcontrol.try_cancel.async.shared::cta.mbarrier::complete_tx::bytes"
        ".multicast::cluster::all.b128 [%r1], [%r2]",
        "clusterlaunchcontrol.try_cancel.async.shared::cta.mbarrier::complete_tx::bytes.b128 "
        "[%r1], [%r2]",
        "clusterlaunchcontrol.try_cancel.async.mbarrier::complete_tx::bytes.b128 [%r1], [%r2]",
        "clusterlaunchcontrol.query_cancel.is_canceled.pred.b128 %p1, %q1",
        "clusterlaunchcontrol.query_cancel.get_first_ctaid.v4.b32.b128 {%r1, %r2, %r3, _}, %q1",
        "clusterlaunchcontrol.query_cancel.get_first_ctaid::y.b32.b128 %r1, %q1"), (
        "clusterlaunchcontrol.try_cancel.shared::cta.mbarrier::complete_tx::bytes.b128 "
        "[%r1], [%r2]",
        "clusterlaunchcontrol.try_cancel.async.shared::cluster.mbarrier::complete_tx::bytes"
        ".b128 [%r1], [%r2]",
        "clusterlaunchcontrol.query_cancel.is_canceled.b128 %p1, %q1",
        "clusterlaunchcontrol.query_cancel.get_first_ctaid.v4.b32.b128 {%r1, %r2}, %q1")),
}
