"""The PTX checker's address map: which buffer and offset an address names.

A CTA's shared window starts at ``SHARED_BASE``; ``mapa`` puts (rank + 1) << 24
into a ``.shared::cluster`` address, so an unmapped (shared::cta) address used as
a cluster address means "own CTA", as on hardware; global buffer i lives at
(i + 1) << ``GLOBAL_SHIFT``, local memory at ``LOCAL_BASE``, the kernel's parameters
at ``PARAM_BASE`` (``cvta.param`` of a parameter's offset; ``ld.param`` takes the
offset itself); a generic address (``ld`` / ``st`` without a state space) is
resolved by this map at run time and then takes the path of its space.  A tensor
map's 128 parameter bytes (``Machine.tensor_maps``) are the TMA instructions'
(``tensor_map``): a load of any of them is refused, the checker does not model the
descriptor's encoding.  Accesses are checked for bounds and natural
alignment; an access to the shared memory of a CTA that has exited is the
finding ``exit``.
"""

from __future__ import annotations

from operator import attrgetter

from mosaic_async_store.check.findings import Finding, Stop, fault
from mosaic_async_store.check.tensor_map import TENSOR_MAP_BYTES

__all__ = ["swizzle_address", "SHARED_BASE", "LOCAL_BASE", "PARAM_BASE", "GLOBAL_SHIFT", "NOT_SHARED", "mem",
           "mem_fn", "plain_shared", "plain_shared_lanes", "plain_global_lanes",
           "param_offset", "tensor_map"]

SHARED_BASE = 0x400            # sm_90 reserves the first 1 KiB of the shared window
LOCAL_BASE, GLOBAL_SHIFT = 0x100000, 40
# The generic window of the parameters: above every shared::cluster address ((rank + 1)
# << 24, rank < 16) and below global buffer 0 (1 << 40).
PARAM_BASE = 1 << 32
_GLOBAL_MASK = (1 << GLOBAL_SHIFT) - 1
_REMOTE_SINCE = attrgetter("remote_since")   # (C loops over a warp's lanes: map)
NOT_SHARED = ("global", "local", "param")   # spaces whose buffers are never SMEM


def mem(k, th, space, addr, n):
  """(buffer, offset) of an n-byte access, checked for bounds and alignment.
  ``space`` None: a generic address, whose window says the space (module doc)."""
  if space is None:
    space = ("global" if addr >> GLOBAL_SHIFT else
             "local" if LOCAL_BASE <= addr < LOCAL_BASE + len(th.local) else
             "param" if PARAM_BASE <= addr < PARAM_BASE + len(k.param_buf) else
             "shared::cluster" if addr >> 24 else "shared")
  if addr % n:
    raise fault(f"misaligned {n}-byte {space} access at {addr:#x}")
  if space == "global":
    idx, off = (addr >> GLOBAL_SHIFT) - 1, addr & ((1 << GLOBAL_SHIFT) - 1)
    buf = k.gbufs[idx] if 0 <= idx < len(k.gbufs) else b""
  elif space.startswith("shared"):
    if addr >> 24 and space != "shared::cluster":
      raise fault(f"cluster address {addr:#x} used as a shared::cta address")
    rank = (addr >> 24) - 1 if addr >> 24 else th.cta
    if rank >= len(k.smem):
      raise fault(f"shared::cluster address {addr:#x}: no such CTA")
    if rank != th.cta:
      if k.exited[rank]:
        raise Stop(Finding("exit", f"CTA {th.cta} thread {th.tid} accesses the shared "
                            f"memory of CTA {rank}, which has exited"))
      if th.remote_since is None:   # see fences._fence (.sync_restrict::shared::cta)
        th.remote_since = int(th.vc[th.slot])
    buf, off = k.smem[rank], (addr & 0xFFFFFF) - SHARED_BASE
  elif space == "local":
    buf, off = th.local, addr - LOCAL_BASE
  elif space == "param":
    buf, off = k.param_buf, param_offset(addr)
    _refuse_map_bytes(k, addr, off, n)
  else:
    raise NotImplementedError(f"state space {space}")
  if off < 0 or off + n > len(buf):
    raise fault(f"{n}-byte {space} access at {addr:#x} is out of bounds")
  return buf, off


def param_offset(addr):
  """The parameter-space offset of ``addr``: a generic address in the parameter window
  (``cvta.param``'s), or the offset itself (a ``.param`` address: the symbol's)."""
  return addr - PARAM_BASE if addr >= PARAM_BASE else addr


def _refuse_map_bytes(k, addr, off, n):
  """Refuses (NotImplementedError: a limit of the checker, which ``check_ptx`` reports
  as a refusal) an access to any byte of a tensor-map parameter."""
  for start, tmap in k.tensor_maps.items():
    if start < off + n and off < start + TENSOR_MAP_BYTES:
      raise NotImplementedError(
          f"a {n}-byte load at {addr:#x} (parameter bytes {off}..{off + n - 1}) reads the "
          "bytes of a tensor map parameter: the checker does not model the descriptor's "
          f"encoding (bytes {start}..{start + TENSOR_MAP_BYTES - 1} hold {tmap!r})")


def tensor_map(k, th, addr):
  """The ``tensor_map.TensorMap`` whose parameter starts at ``addr`` (a generic address
  in the parameter window, or a parameter-space offset), for the TMA instructions'
  tensor-map operand; anything else is the kernel's fault (``KernelFault``, naming the
  address).  A map in global memory is not modelled (NotImplementedError)."""
  if addr >> GLOBAL_SHIFT:
    raise NotImplementedError(f"a tensor map in global memory ({addr:#x}): the checker "
                              "takes tensor maps as kernel parameters only")
  if addr < PARAM_BASE and addr >> 24 or LOCAL_BASE <= addr < LOCAL_BASE + len(th.local):
    raise fault(f"CTA {th.cta} thread {th.tid}: tensor-map address {addr:#x} is not "
                      "in the parameter space")
  tmap = k.tensor_maps.get(param_offset(addr))
  if tmap is None:
    starts = sorted(k.tensor_maps)
    raise fault(f"CTA {th.cta} thread {th.tid}: no tensor map parameter starts at "
                      f"{addr:#x} (parameter offset {param_offset(addr)}; the maps start "
                      f"at offsets {starts or 'nowhere: the kernel has none'})")
  return tmap


def plain_shared(k, th, addr, n, cluster):
  """(CTA, offset) of an ``n``-byte shared-memory access at ``addr`` by ``th`` when it is
  the plain case, else None (then ``mem`` resolves it, with its checks and messages):
  aligned, in bounds, and in the thread's own CTA, or, with ``cluster`` (a
  ``.shared::cluster`` address), in a CTA it has accessed before that has not exited
  (``mem`` records the first such access and checks the exit rule)."""
  hi = addr >> 24
  if addr % n or (hi and not (cluster and hi <= len(k.smem))):
    return None
  rank = hi - 1 if hi else th.cta
  if rank != th.cta and (th.remote_since is None or k.exited[rank]):
    return None
  off = (addr & 0xFFFFFF) - SHARED_BASE
  if off < 0 or off + n > len(k.smem[rank]):
    return None
  return rank, off


def plain_shared_lanes(k, lanes, addrs, n, cluster):
  """``plain_shared`` for the lanes of one warp at once: (CTA, [offset]) when every
  lane's access at ``addrs`` is the plain case in one CTA, else None."""
  lo, top = min(addrs), max(addrs)
  hi, cta = lo >> 24, lanes[0].cta   # (the lowest and highest in one window: all are)
  if top >> 24 != hi or lo % n or hi and not (cluster and hi <= len(k.smem)):
    return None
  if n > 1 and lo != top and any(map(n.__rmod__, addrs)):
    return None
  rank = hi - 1 if hi else cta
  if rank != cta and (k.exited[rank] or None in map(_REMOTE_SINCE, lanes)):
    return None
  base = (hi << 24) + SHARED_BASE   # (offset: the address's low 24 bits, less the base)
  if lo < base or top - base + n > len(k.smem[rank]):
    return None
  return rank, [a - base for a in addrs]


def plain_global_lanes(k, addrs, n):
  """``mem_fn``'s plain global case for many accesses at once: (buffer, [offset]) when
  every access at ``addrs`` is aligned and inside one argument's buffer, else None."""
  lo, top = min(addrs), max(addrs)
  idx = (lo >> GLOBAL_SHIFT) - 1
  if not 0 <= idx < len(k.gbufs) or top >> GLOBAL_SHIFT != idx + 1 or lo % n or \
     (n > 1 and lo != top and any(map(n.__rmod__, addrs))):
    return None
  buf, base = k.gbufs[idx], (idx + 1) << GLOBAL_SHIFT
  return (buf, [a - base for a in addrs]) if top - base + n <= len(buf) else None


def mem_fn(k, space, n):
  """A function (th, addr) -> ``mem(k, th, space, addr, n)`` for one instruction:
  the common case (aligned, in bounds, a static space, no other CTA that needs
  the exit check or a first remote access) inline, anything else through
  ``mem`` itself (its checks and messages)."""
  def slow(th, space, addr, n):   # (the module's mem)
    return mem(k, th, space, addr, n)
  if space == "global":
    def resolve(th, addr):
      idx, gbufs = (addr >> GLOBAL_SHIFT) - 1, k.gbufs
      if not addr % n and 0 <= idx < len(gbufs):
        buf, off = gbufs[idx], addr & _GLOBAL_MASK
        if off + n <= len(buf):
          return buf, off
      return slow(th, space, addr, n)
  elif space in ("shared", "shared::cta", "shared::cluster"):
    cluster = space == "shared::cluster"
    def resolve(th, addr):
      place = plain_shared(k, th, addr, n, cluster)
      if place is None:
        return slow(th, space, addr, n)
      return k.smem[place[0]], place[1]
  else:
    def resolve(th, addr):
      return slow(th, space, addr, n)
  return resolve


def swizzle_address(addr, swizzle):
  """The hardware's swizzle of shared-memory byte address(es) ``addr`` (an int or an
  integer array), as TMA, WGMMA and tcgen05 read and write shared memory: 16-byte chunk
  bits [4, 4+b) ^= address bits [7, 7+b), b = log2(swizzle / 16); ``swizzle`` 0 or
  None: none."""
  if not swizzle:
    return addr
  mask = swizzle // 16 - 1
  return addr ^ (((addr >> 7) & mask) << 4)
