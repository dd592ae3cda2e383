"""The value a lane holds where the ISA leaves it undefined (``shfl.sync`` from a lane
outside its membermask, or an exited one: ``collectives.shfl``): carried through bitwise and
arithmetic operations, and the finding ``undefined-value`` wherever its bits are used.
"""

from __future__ import annotations

from mosaic_async_store.check.findings import Finding, Stop

__all__ = ["Undefined"]


class Undefined:
  """The value a ``shfl.sync`` lane receives from a source lane outside the membermask
  or exited: "results are undefined" (PTX ISA, shfl.sync), so no bit of it is known.
  Bitwise and arithmetic operations carry it on (``x & 0`` and ``x * 0`` are 0); any
  use that needs its bits (a stored value, an address, a branch, guard or predicate,
  a comparison, sign extension, a float operation, a lane index) raises the finding
  ``undefined-value`` naming where it came from, instead of running on a made-up
  value.  ``origin``: that sentence."""

  __slots__ = ("origin",)

  def __init__(self, origin):
    self.origin = origin

  def _carry(self, *other):
    return self

  def _and(self, other):   # (bits the mask clears are known: zero)
    return 0 if type(other) is int and other == 0 else self

  def _use(self, *other):
    raise Stop(Finding("undefined-value", f"a value that is undefined ({self.origin}) is "
                        "used where its bits matter (a store, an address, a branch or "
                        "predicate, a comparison)"))

  __add__ = __radd__ = __sub__ = __rsub__ = __or__ = __ror__ = __xor__ = __rxor__ = _carry
  __lshift__ = __rlshift__ = __rshift__ = __rrshift__ = __invert__ = __neg__ = _carry
  __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _carry   # (their truth: _use)
  __and__ = __rand__ = __mul__ = __rmul__ = _and
  __bool__ = __int__ = __index__ = __hash__ = __float__ = __mod__ = __rmod__ = _use
  __floordiv__ = __rfloordiv__ = __pow__ = to_bytes = bit_length = _use

  def __format__(self, spec):
    return "undefined"

  def __repr__(self):
    return f"Undefined({self.origin!r})"
