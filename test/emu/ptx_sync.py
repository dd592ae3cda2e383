"""Synchronisation semantics of the PTX interpreter: mbarriers and warp collectives.

Mixed into ``ptx_interp.PtxKernel``, which provides ``self.mbar`` (barrier key
-> state), ``self.code``, ``self.collectives``, ``_set`` and ``_mem``.  A
barrier's state is ``[phase, pending arrivals, tx-count, arrival count]``; a
phase completes when no arrival is pending and the tx-count is zero.
"""

from __future__ import annotations

BLOCK = object()  # returned by an instruction: this thread waits for the scheduler


class SyncSemantics:
  """mbarrier.* and shfl.sync / elect.sync, compiled to per-thread closures."""

  def _mbarrier(self, mods, ops, src, space):
    """State of a barrier: [phase, pending arrivals, tx-count, arrival count]."""
    if mods[0] == "init":
      def init(th, addr=src[0], count=src[1]):
        self.mbar[self._bar_key(th, space, addr(th))] = [0, count(th), 0, count(th)]
      return init
    if mods[0] == "arrive" and len(ops) in (2, 3):
      # [state,] [addr], tx-count with .expect_tx; else [state,] [addr], arrive-count
      expect, zero, one = "expect_tx" in mods, (lambda th: 0), (lambda th: 1)
      addr, put = src[1], self._set(ops[0], 64)
      tx = src[2] if expect and len(ops) == 3 else zero
      count = src[2] if not expect and len(ops) == 3 else one
      def arrive(th):  # the expect-tx operation first, then the arrive-on operation
        key = self._bar_key(th, space, addr(th))
        st = self._bar(key)
        st[2], st[1] = st[2] + tx(th), st[1] - count(th)
        if st[1] < 0:
          raise RuntimeError(f"more arrivals than the count on barrier {key}")
        put(th, st[0])
        self._advance(key)
      return arrive
    if mods[0] == "expect_tx":
      def expect(th, addr=src[0], tx=src[1]):
        self._bar(self._bar_key(th, space, addr(th)))[2] += tx(th)
      return expect
    if mods[:2] == ["try_wait", "parity"]:
      pred, addr, parity = ops[0][1], src[1], src[2]
      def try_wait(th):
        key, par = self._bar_key(th, space, addr(th)), parity(th) & 1
        if self._bar(key)[0] & 1 != par:   # the phase of that parity has completed
          th.regs[pred] = 1
          return None
        th.wait = ("mbar", key, par, pred)
        return BLOCK
      return try_wait
    raise NotImplementedError(f"opcode mbarrier.{'.'.join(mods)}")

  def _warp_collective(self, base, mods, ops, src):
    """The lane blocks; ``resolve`` runs once all 32 lanes wait at this instruction."""
    dest = ops[0][1:] if ops[0][0] == "pair" else (ops[0],)
    puts = [self._set(dest[0], 32)] + [self._set(o, 1) for o in dest[1:]]
    k = len(self.code)

    def resolve(lanes):
      if any(src[-1](th) & 0xFFFFFFFF != 0xFFFFFFFF for th in lanes):
        raise NotImplementedError(f"{base} with a partial member mask")
      vals = [src[1](th) for th in lanes] if base == "shfl" else None
      for lane, th in enumerate(lanes):
        if base == "elect":   # full mask: lane 0 leads; every lane learns its id
          j, ok = 0, lane == 0
        else:                 # c = segment mask << 8 | clamp
          b, c = src[2](th), src[3](th)
          lo = lane & (c >> 8) & 31
          hi = lo | (c & 31 & ~(c >> 8))
          j = lane ^ b if mods[1] == "bfly" else lo | (b & ~(c >> 8) & 31)
          ok = j <= hi
          j = vals[j if ok else lane]
        puts[0](th, j)
        if len(puts) > 1:
          puts[1](th, ok)
    self.collectives[k] = resolve

    def block(th):
      th.wait = ("warp", k)
      return BLOCK
    return block

  def _bar_key(self, th, space, addr):
    buf, off = self._mem(th, space, addr, 8)
    return next(i for i, b in enumerate(self.smem) if b is buf), off

  def _bar(self, key):
    if key not in self.mbar:
      raise RuntimeError(f"mbarrier {key} used before mbarrier.init")
    return self.mbar[key]

  def _advance(self, key):
    """A phase completes when no arrival is pending and the tx-count is zero."""
    st = self.mbar[key]
    if st[1] == 0 and st[2] == 0:
      st[0], st[1] = st[0] + 1, st[3]

  def _stmatrix(self, trans, space, addr, regs):
    """``stmatrix.sync.aligned.m8n8.x4{.trans}.shared.b16 [p], {r0..r3}``: a warp stores
    four 8x8 matrices of 16-bit elements.  Lane ``8i + j`` gives the address of row
    ``j`` of matrix ``i``; register ``ri`` of lane ``l`` holds row ``l // 4``, columns
    ``2 (l % 4)`` and ``+1`` (low half first) of matrix ``i``.  ``.trans`` stores each
    matrix transposed: memory row ``j`` gets the matrix's column ``j``."""
    k = len(self.code)

    def resolve(lanes):
      rows = [addr(th) for th in lanes]          # lane 8i + j: row j of matrix i
      data = [[g(th) for g in regs] for th in lanes]
      for i in range(4):
        for j in range(8):
          row = bytearray(16)
          for c in range(8):                     # memory column c of memory row j
            r, col = (c, j) if trans else (j, c)  # fragment element (row, column)
            word = data[4 * r + col // 2][i]
            half = (word >> (16 * (col % 2))) & 0xFFFF
            row[2 * c:2 * c + 2] = half.to_bytes(2, "little")
          buf, off = self._mem(lanes[8 * i + j], space, rows[8 * i + j], 16)
          buf[off:off + 16] = row
    self.collectives[k] = resolve

    def block(th):
      th.wait = ("warp", k)
      return BLOCK
    return block
