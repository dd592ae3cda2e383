"""IR for the data side of a plan: register steps, lane exchange steps, store operands.

Every plan value is materialised as a ``vector<N x i8>``; byte slicing and
concatenation are then plain vector shuffles, which LLVM's NVPTX backend turns
into ``prmt``/shifts (or nothing, when a register is stored whole).
"""

from __future__ import annotations

import numpy as np
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import arith, vector

from mosaic_async_store.lowering import ptx
from mosaic_async_store.plan.register_steps import Gather

__all__ = ["ValueBuilder"]


def _int(bits):
  return ir.IntegerType.get_signless(bits)


def _bytes_ty(n):
  return ir.VectorType.get((n,), _int(8))


def _concat(a: ir.Value, b: ir.Value) -> ir.Value:
  na, nb = ir.VectorType(a.type).shape[0], ir.VectorType(b.type).shape[0]
  return vector.shuffle(a, b, list(range(na + nb)))


def _slice(v: ir.Value, start: int, size: int) -> ir.Value:
  if start == 0 and ir.VectorType(v.type).shape[0] == size:
    return v
  # A shuffle rather than vector.extract_strided_slice: the latter has no
  # direct LLVM lowering in the stock NVVM pipeline.
  return vector.shuffle(v, v, list(range(start, start + size)))


def bytes_to_int(v: ir.Value, bits: int) -> ir.Value:
  """vector<bits/8 x i8> -> i<bits>."""
  as_vec = vector.bitcast(ir.VectorType.get((1,), _int(bits)), v)
  return vector.extract(as_vec, [], [0])


def int_to_bytes(x: ir.Value, nbytes: int) -> ir.Value:
  as_vec = vector.broadcast(ir.VectorType.get((1,), _int(nbytes * 8)), x)
  return vector.bitcast(_bytes_ty(nbytes), as_vec)


def _shuffle_bytes(v: ir.Value, lane_mask: int) -> ir.Value:
  """Lane ``lane ^ lane_mask``'s copy of ``vector<N x i8>`` (N padded to words)."""
  n = ir.VectorType(v.type).shape[0]
  padded = -(-n // 4) * 4
  if padded != n:
    v = _concat(v, arith.constant(_bytes_ty(padded - n), ir.DenseElementsAttr.get_splat(
        _bytes_ty(padded - n), ir.IntegerAttr.get(_int(8), 0))))
  words = vector.bitcast(ir.VectorType.get((padded // 4,), _int(32)), v)
  out = None
  for w in range(padded // 4):
    got = ptx.emit_shfl_bfly(vector.extract(words, [], [w]), lane_mask)
    piece = int_to_bytes(got, 4)
    out = piece if out is None else _concat(out, piece)
  return _slice(out, 0, n)


def _gather_levels(n: int, masks) -> list[tuple[int, int]]:
  """``(registers before the gather, mask)`` of each gather in ``masks``, in order.

  A gather doubles the registers: after it, registers ``[size, 2 size)`` are
  lane ``t ^ mask``'s registers ``[0, size)`` (``packing.with_partner``).
  """
  return [(n << i, mask) for i, mask in enumerate(masks)]


class ValueBuilder:
  """Builds (once) the IR value of every plan value and store operand."""

  def __init__(self, plan, registers: np.ndarray, lane: ir.Value):
    self.plan = plan
    self.registers = registers
    self.lane = lane
    self._values: dict[int, ir.Value] = {}
    self._bits: dict[int, ir.Value] = {}
    self._by_id = {v.id: v for v in plan.values}
    self._made = {id(v.exchange): v.id for v in plan.values if v.exchange is not None}
    self._made_registers: dict[int, ir.Value] = {}
    self._partner_words: dict[tuple[int, int, int], ir.Value] = {}     # (r, word, mask)
    self._partner_elements: dict[tuple[int, int, int], ir.Value] = {}  # (r, element, mask)
    self._received: list[ir.Value] = []
    # The register steps (register_steps): gathers before the byte regrouping act on
    # the array's own sub-byte elements, those after it (or without one) on registers.
    steps = plan.register_steps
    self._position = {id(s): i for i, s in enumerate(steps)}
    at = next((i for i, s in enumerate(steps) if not isinstance(s, Gather)), None)
    self._regroup = None if at is None else steps[at]
    self._regroup_at = -1 if at is None else at
    self._source_masks = [s.mask for s in steps[:self._regroup_at]] if at is not None else []
    self._gather_masks = [s.mask for s in steps[self._regroup_at + 1:]]

  def lane_bit(self, bit: int) -> ir.Value:
    """i1: whether lane bit ``bit`` is set."""
    if bit not in self._bits:
      i32 = _int(32)
      masked = arith.andi(self.lane, arith.constant(i32, 1 << bit))
      self._bits[bit] = arith.cmpi(arith.CmpIPredicate.ne, masked, arith.constant(i32, 0))
    return self._bits[bit]

  def _source_element(self, r: int, j: int) -> ir.Value:
    """Lane ``j`` of the array's register ``r`` as an i8 (a sub-byte element, zero-extended).

    Registers past the array's own come from the gathers before the byte
    regrouping: after gather ``i`` (mask ``m``), registers ``[n, 2n)`` are lane
    ``t ^ m``'s registers ``[0, n)``.
    """
    levels = _gather_levels(self.plan.source_registers.num_registers, self._source_masks)
    for size, mask in reversed(levels):
      if r >= size:
        return self._partner_element(r - size, j, mask)
    reg = self.registers.flat[r]
    el = vector.extract(reg, [], [j])
    bits = self.plan.dtype.bits
    if not isinstance(el.type, ir.IntegerType):
      el = arith.bitcast(_int(bits), el)
    return arith.extui(_int(8), el)

  def _partner_element(self, r: int, j: int, mask: int) -> ir.Value:
    """Lane ``t ^ mask``'s element ``(r, j)`` (an i8); one ``shfl.sync.bfly`` per
    32 bits of the register, made once and shared by its elements."""
    if (r, j, mask) in self._partner_elements:
      return self._partner_elements[r, j, mask]
    bits = self.plan.dtype.bits
    per_word = 32 // bits
    key = (r, j // per_word, mask)
    if key not in self._partner_words:
      i32 = _int(32)
      first = j // per_word * per_word
      word = None
      for k in range(first, min(first + per_word, self.plan.source_registers.vector_length)):
        el = arith.extui(i32, self._source_element(r, k))
        if k > first:
          el = arith.shli(el, arith.constant(i32, (k - first) * bits))
        word = el if word is None else arith.ori(word, el)
      self._partner_words[key] = ptx.emit_shfl_bfly(word, mask)
    got = self._partner_words[key]  # built by emit_gather(), by every lane
    shift = j % per_word * bits
    if shift:
      got = arith.shrui(got, arith.constant(_int(32), shift))
    el = arith.trunci(_int(8), arith.andi(got, arith.constant(_int(32), (1 << bits) - 1)))
    self._partner_elements[r, j, mask] = el
    return el

  def emit_gather(self, step) -> None:
    """A ``register_steps.Gather``: every lane shuffles (only the gathering ones use
    the result), 32 bits per ``shfl.sync.bfly``.

    Before the byte regrouping it receives the partner's elements, words of the
    array's own registers; after it (or without one), whole registers: after
    gather ``i`` the registers ``[n, 2n)`` are lane ``t ^ mask``'s ``[0, n)``.
    """
    at = self._position[id(step)]
    if at < self._regroup_at:
      size = self.plan.source_registers.num_registers << at
      for r in range(size, 2 * size):
        for j in range(self.plan.source_registers.vector_length):
          self._source_element(r, j)
      return
    n = self.plan.registers.num_registers >> len(self._gather_masks)
    size = n << (at - self._regroup_at - 1)
    for r in range(size):
      self._made_registers[size + r] = _shuffle_bytes(self._register(r), step.mask)

  def emit_regroup(self, step) -> None:
    """A ``register_steps.ByteRegroup``: the nibble exchange it needs, if any (the
    bytes themselves are assembled on first use, in ``_register``)."""
    assert step is self._regroup
    self.run_nibble_exchange()

  def run_nibble_exchange(self) -> None:
    """Sends the halves of the bytes each lane's partner assembles (``ByteRegroup``).

    Eight 4-bit halves share one 32-bit ``shfl.sync.bfly``; every lane takes
    part, so this runs before any store, like the byte exchanges.
    """
    rg = self._regroup
    self._received = []
    if rg is None or not rg.mask:
      return
    i32, bits = _int(32), self.plan.dtype.bits
    bit = self.lane_bit(rg.mask.bit_length() - 1)
    per_word = 32 // bits
    for first in range(0, rg.send.shape[1], per_word):
      word = None
      for i in range(first, min(first + per_word, rg.send.shape[1])):
        options = [arith.extui(i32, self._source_element(*map(int, rg.send[b, i])))
                   for b in (0, 1)]
        nib = arith.select(bit, options[1], options[0])
        if i > first:
          nib = arith.shli(nib, arith.constant(i32, (i - first) * bits))
        word = nib if word is None else arith.ori(word, nib)
      got = ptx.emit_shfl_bfly(word, rg.mask)
      for i in range(first, min(first + per_word, rg.send.shape[1])):
        shifted = arith.shrui(got, arith.constant(i32, (i - first) * bits)) if i > first else got
        self._received.append(arith.trunci(_int(8), arith.andi(
            shifted, arith.constant(i32, (1 << bits) - 1))))

  def _piece(self, b: int, r: int, k: int) -> ir.Value:
    """Piece ``k`` of virtual register ``r`` for lanes whose mask bit is ``b`` (an i8)."""
    rg = self._regroup
    src_reg, lane = map(int, rg.own[b, r, k])
    if src_reg < 0:
      return self._received[int(rg.slot[b, r, k])]
    return self._source_element(src_reg, lane)

  def _regrouped_register(self, r: int) -> ir.Value:
    """Virtual register ``r`` of a regrouped plan: one byte assembled from its pieces."""
    rg, bits = self._regroup, self.plan.dtype.bits
    byte = None
    for k in range(rg.own.shape[2]):
      same = (np.array_equal(rg.own[0, r, k], rg.own[1, r, k])
              and rg.slot[0, r, k] == rg.slot[1, r, k])
      el = self._piece(0, r, k)
      if not same:  # lanes with the mask bit set assemble a different byte
        el = arith.select(self.lane_bit(rg.mask.bit_length() - 1), self._piece(1, r, k), el)
      if k:
        el = arith.shli(el, arith.constant(_int(8), k * bits))
      byte = el if byte is None else arith.ori(byte, el)
    return vector.broadcast(_bytes_ty(1), byte)

  def _register(self, r: int) -> ir.Value:
    """Register ``r`` of the plan's register map, as ``vector<N x i8>``."""
    if r in self._made_registers:
      return self._made_registers[r]
    regs = self.plan.registers
    if self._regroup is not None:  # built once: gathers and values share it
      self._made_registers[r] = self._regrouped_register(r)
      return self._made_registers[r]
    reg = self.registers.flat[r] if self.registers.ndim else self.registers.item()
    if regs.splat:  # a scalar: broadcast it to the synthetic vector length
      reg = vector.broadcast(ir.VectorType.get((regs.vector_length,), reg.type), reg)
    nbytes = regs.vector_length * self.plan.dtype.bits // 8
    return vector.bitcast(_bytes_ty(nbytes), reg)

  def value(self, vid: int) -> ir.Value:
    if vid not in self._values:
      v = self._by_id[vid]
      if v.exchange is not None:
        raise AssertionError("exchanges are built by their steps (prepare()) first")
      self._values[vid] = _slice(self._register(v.reg), v.byte, v.size)
    return self._values[vid]

  def prepare(self) -> None:
    """Emits the plan's register steps, then its lane exchange steps, in order, each
    by its ``emit``: before any store, since every lane takes part."""
    for step in (*self.plan.register_steps, *self.plan.exchanges):
      step.emit(self)

  def emit_exchange(self, step) -> None:
    """A ``plan_types.LaneExchange``: its exchanges' sent halves packed into one
    32-bit ``shfl.sync.bfly``, each merged value kept for the stores."""
    batch = step.exchanges
    size = batch[0].a.size
    bit = self.lane_bit(batch[0].lane_mask.bit_length() - 1)
    sends, keeps = [], []
    for e in batch:
      a, b = self.value(e.a.id), self.value(e.b.id)
      sends.append(arith.select(bit, a, b))
      keeps.append(arith.select(bit, b, a))
    packed = sends[0]
    for s in sends[1:]:
      packed = _concat(packed, s)
    n = size * len(batch)
    word = bytes_to_int(packed, 8 * n)
    word = word if n == 4 else arith.extui(_int(32), word)
    got = ptx.emit_shfl_bfly(word, batch[0].lane_mask)
    got = got if n == 4 else arith.trunci(_int(8 * n), got)
    received = int_to_bytes(got, n)
    for i, (e, keep) in enumerate(zip(batch, keeps)):
      recv = _slice(received, i * size, size)
      own_low, recv_low = _concat(keep, recv), _concat(recv, keep)
      lo0, lo1 = e.keep_low
      if lo0 == lo1:
        merged = own_low if lo0 else recv_low
      else:
        merged = arith.select(bit, own_low if lo1 else recv_low,
                              own_low if lo0 else recv_low)
      self._values[self._made[id(e)]] = merged

  def data(self, parts) -> ir.Value:
    """The bytes of one store, low bytes first, as vector<width x i8>."""
    out = None
    for p in parts:
      piece = _slice(self.value(p.value), p.byte, p.size)
      out = piece if out is None else _concat(out, piece)
    return out

  def instruction_data(self, ins) -> ir.Value:
    """Like data(), with staggered stores choosing their bytes by lane bits."""
    if not ins.choices:
      return self.data(ins.parts)
    options = [self.data(c) for c in ins.choices]
    for i, b in enumerate(ins.choice_bits):  # fold one lane bit per level
      bit = self.lane_bit(b)
      options = [arith.select(bit, options[k + (1 << 0)], options[k])
                 for k in range(0, len(options), 2)]
      del i
    return options[0]

  @staticmethod
  def words(data: ir.Value, width: int) -> list[ir.Value]:
    """vector<width x i8> -> i32 operands (u8/u16 go zero-extended in an i32)."""
    if width < 4:
      return [arith.extui(_int(32), bytes_to_int(data, 8 * width))]
    as_words = vector.bitcast(ir.VectorType.get((width // 4,), _int(32)), data)
    return [vector.extract(as_words, [], [i]) for i in range(width // 4)]

  @staticmethod
  def scalar(data: ir.Value, width: int) -> ir.Value:
    """vector<width x i8> -> one integer of width*8 bits (reduction operand)."""
    return bytes_to_int(data, 8 * width)
