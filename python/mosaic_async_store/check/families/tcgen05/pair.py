"""The CTA pair of ``.cta_group::2`` as ``tcgen05.mma`` and ``tcgen05.commit`` meet it
(split out of ``mma``: both need it).

PTX ISA 9.7.16.5.1: "Any 2 CTAs within the cluster whose %cluster_ctarank differs by the
last bit only is said to form a CTA pair"; the one with the last bit 0 is the even CTA,
the other the odd one, and each is the other's peer.  9.7.16.5 Table 46, for ``.mma``,
``.cp``, ``.shift`` and ``.commit`` with ``.cta_group::2``: "Issue from a single thread
from the CTA-Pair would initiate the base operation. When the current CTA issues the
operation, the peer CTA should be active and should not have exited."  A peer that is not
in the cluster, or has exited when the operation is issued, is ``tcgen05-peer`` (the run
stops: the operation would reach memory that is gone).  In the checker every CTA of the
cluster is launched at once, so "active" is "has not exited".
"""

from __future__ import annotations

from mosaic_async_store.check.findings import Finding, Stop

__all__ = ["peer", "ctas", "RULES"]

RULES = {
    "tcgen05-peer": "PTX ISA 9.7.16.5 Table 46 (.mma, .cp, .shift, .commit with "
                    ".cta_group::2): \"Issue from a single thread from the CTA-Pair would "
                    "initiate the base operation. When the current CTA issues the operation, "
                    "the peer CTA should be active and should not have exited.\"; 9.7.16.5.1: "
                    "\"Any 2 CTAs within the cluster whose %cluster_ctarank differs by the "
                    "last bit only is said to form a CTA pair\"",
}


def peer(k, th, where) -> int:
  """The rank of ``th``'s peer CTA, which must be in the cluster and not have exited
  (``tcgen05-peer``); ``where`` names the instruction in the message."""
  other = th.cta ^ 1
  if other >= len(k.smem):
    raise Stop(Finding("tcgen05-peer", f"{where} in a cluster of {len(k.smem)} CTA(s): CTA "
                       f"{th.cta} has no peer CTA (rank {other})"))
  if k.exited[other]:
    raise Stop(Finding("tcgen05-peer", f"{where} after its peer CTA {other} exited: the "
                       "peer CTA should be active and should not have exited"))
  return other


def ctas(k, th, where, opcode) -> tuple[int, int]:
  """(even CTA, odd CTA) of the pair whose MMA ``th`` issues.  The ISA lets either CTA's
  thread issue it (Table 46), but which CTA's shared memory holds which rows of A and
  which half of B's columns, and which rows of D each tensor memory receives, it gives
  in figures only; the placement the checker runs is the one jax's and CUTLASS's
  kernels rely on, where the even CTA issues.  An issue from the odd CTA is refused by
  name rather than guessed."""
  other = peer(k, th, where)
  if th.cta & 1:
    raise NotImplementedError(f"opcode {opcode} (.cta_group::2 issued from the odd CTA "
                              f"{th.cta} of its pair: where its operands lie is not given by "
                              "the ISA's text; the checker runs the even CTA's issue)")
  return th.cta, other
