"""The ISA's rules for bulk and tensor copies, as pure functions: each returns None when
the operation keeps the rule, else a message saying how it breaks it.  The machine glue
resolves the operands (addresses to CTAs and offsets, the tensor map's bytes to a
``tma_geometry.MapFields``) and files a message as a finding (the rule's name is the
key of ``RULES``).

Sources, and where they are not the ISA page.  The PTX ISA's own text of 9.7.9.25 was
not among the stored copies this module was written from.  The sentences quoted below
come from NVIDIA's pages that restate it, each named: the CCCL ``cuda::ptx`` page of
cp.async.bulk ("NOTE. Both srcMem and dstMem must be 16-byte aligned, and size must be a
multiple of 16."), the CUDA driver API's cuTensorMapEncodeTiled (the tensor map's
requirements), and the PTX ISA's sentences as recalled where marked "(ISA, recalled)";
those are the ones to verify against the ISA page first.

``RULES``: rule name -> (function, the sentence it rests on).
"""

from __future__ import annotations

__all__ = ["RULES", "size_multiple_of_16", "bulk_aligned", "tensor_smem_aligned",
           "tensor_map_aligned", "tensor_map_space", "multicast_mask", "mbar_with_dst",
           "shared_cta_is_own", "dims_match", "store_coords_non_negative",
           "traversal_stride_inner", "copy_to_peer", "tensor_map_rules", "BULK_ALIGN",
           "TENSOR_SMEM_ALIGN", "TENSOR_MAP_ALIGN"]

BULK_ALIGN, TENSOR_SMEM_ALIGN, TENSOR_MAP_ALIGN = 16, 128, 64

_CCCL_BULK = ("CCCL cuda::ptx, cp.async.bulk: \"NOTE. Both srcMem and dstMem must be 16-byte "
              "aligned, and size must be a multiple of 16.\"")


def size_multiple_of_16(size, what="cp.async.bulk"):
  """cp.async.bulk / cp.reduce.async.bulk / cp.async.bulk.prefetch: ``size`` is a
  multiple of 16 (and not zero: a copy of nothing is not one the ISA describes)."""
  if size <= 0 or size % 16:
    return f"{what} of {size} bytes: the size must be a positive multiple of 16"
  return None


def bulk_aligned(addr, operand, what="cp.async.bulk"):
  """The shared or global address ``operand`` (dstMem / srcMem) of a non-tensor bulk
  copy is 16-byte aligned."""
  if addr % BULK_ALIGN:
    return f"{what}: {operand} {addr:#x} is not 16-byte aligned"
  return None


def tensor_smem_aligned(addr, what="cp.async.bulk.tensor"):
  """The shared-memory address of a tensor copy (a load's dstMem, a store's srcMem) is
  128-byte aligned.  (The swizzle adds nothing here: it is a function of the address
  bits, ``tma_geometry.swizzle_address``, so a 128-byte-aligned buffer that is not
  aligned to the swizzle's repeat sees the pattern start part-way, which the geometry
  models.)"""
  if addr % TENSOR_SMEM_ALIGN:
    return f"{what}: the shared-memory address {addr:#x} is not 128-byte aligned"
  return None


def tensor_map_aligned(addr, what="cp.async.bulk.tensor"):
  """The tensor map's address is 64-byte aligned."""
  if addr % TENSOR_MAP_ALIGN:
    return f"{what}: the tensor map at {addr:#x} is not 64-byte aligned"
  return None


def tensor_map_space(space, what="cp.async.bulk.tensor"):
  """The tensor map lies in .param, .const or .global memory (``space``: the state space
  the generic tensorMap address falls in)."""
  if space not in ("param", "const", "global"):
    return (f"{what}: the tensor map's address falls in .{space} memory, not .param, "
            ".const or .global")
  return None


def multicast_mask(mask, cluster_size, what="cp.async.bulk"):
  """A .multicast::cluster copy's ctaMask names only CTAs of the cluster (bit i: the CTA
  of rank i; 16 bits)."""
  mask &= 0xFFFF
  beyond = mask >> cluster_size
  if beyond:
    ranks = [cluster_size + i for i in range(16) if beyond >> i & 1]
    return (f"{what}.multicast::cluster: ctaMask {mask:#06x} names CTA rank(s) {ranks}, "
            f"outside the cluster of {cluster_size}")
  return None


def mbar_with_dst(dst_cta, mbar_cta, what="cp.async.bulk", cta_group=1):
  """A load's mbarrier is in the CTA its data lands in; with ``.cta_group::2``
  (``cta_group`` 2) it may instead be in that CTA's peer, the CTA whose
  ``%cluster_ctarank`` differs in the last bit (PTX ISA 9.7.16.5.1)."""
  if dst_cta == mbar_cta or cta_group == 2 and mbar_cta == dst_cta ^ 1:
    return None
  if cta_group == 2:
    return (f"{what}.cta_group::2: the data lands in CTA {dst_cta} but the mbarrier is CTA "
            f"{mbar_cta}'s: mbar must be in the same CTA as dstMem or in its peer CTA "
            f"{dst_cta ^ 1}")
  return (f"{what}: the data lands in CTA {dst_cta} but the mbarrier is CTA {mbar_cta}'s: "
          "dstMem and mbar must be in the same CTA")


def shared_cta_is_own(cta, executing_cta, operand, what="cp.async.bulk"):
  """A .shared::cta operand (the source of a store or of a shared-to-cluster copy, the
  destination and mbarrier of a .shared::cta load) is in the executing CTA."""
  if cta != executing_cta:
    return (f"{what}: {operand} is a .shared::cta operand of CTA {executing_cta} but "
            f"addresses CTA {cta}'s shared memory")
  return None


def dims_match(form_dims, tmap_rank, what="cp.async.bulk.tensor"):
  """The instruction's .dim is the tensor map's rank."""
  if form_dims != tmap_rank:
    return f"{what}.{form_dims}d with a tensor map of rank {tmap_rank}"
  return None


def store_coords_non_negative(coords, what="cp.async.bulk.tensor"):
  """A tensor copy in the ``.global.shared::cta`` direction (a store or a reduction into
  global memory) starts its box at non-negative coordinates (``coords``: PTX order,
  c0 innermost).  Coordinates past the tensor's end are not restricted: the elements
  out of bounds are not written."""
  negative = [f"c{i} = {c}" for i, c in enumerate(coords) if c < 0]
  if negative:
    return (f"{what} into global memory at tensorCoords {list(coords)}: {', '.join(negative)} "
            "is negative; a store's or reduction's box must start at non-negative "
            "coordinates (only a load may start before the tensor: its out-of-bounds "
            "elements are filled); start the box at 0 and shrink it, or store the edge "
            "through a tensor map whose box fits")
  return None


def traversal_stride_inner(tmap, what="cp.async.bulk.tensor"):
  """A non-interleaved tensor map's traversal stride (element stride) in dimension 0,
  the innermost, is 1."""
  strides = getattr(tmap, "element_strides", None)
  if strides and not getattr(tmap, "interleave", 0) and int(strides[-1]) != 1:
    return (f"{what} with a tensor map whose innermost traversal stride (element_strides"
            f"[-1], the driver's elementStrides[0]) is {int(strides[-1])}: a non-interleaved "
            "map's must be 1; pass element_strides with a last entry of 1")
  return None


def copy_to_peer(dst_cta, executing_cta, what="cp.async.bulk.shared::cluster.shared::cta"):
  """A bulk copy from .shared::cta to .shared::cluster writes another CTA's shared
  memory, not the executing CTA's own."""
  if dst_cta == executing_cta:
    return (f"{what}: dstMem is in the executing CTA {executing_cta}'s own shared memory; "
            "this direction copies into a different CTA of the cluster (mapa the address "
            "to a peer's rank), and a copy within one CTA's shared memory is not one of the "
            "bulk copies")
  return None


def tensor_map_rules(tmap, global_address=None):
  """The tensor map's own requirements (cuTensorMapEncodeTiled's), for a map the kernel
  built or altered itself: a list of messages (empty: it keeps them).  ``tmap`` as in
  tma_geometry (NumPy order); ``global_address``: the tensor's base, if known."""
  out = []
  dims, box, eb = list(tmap.dims), list(tmap.box), int(tmap.elem_bytes)
  strides = [int(s) for s in tmap.strides]
  strides = strides[:-1] if len(strides) == len(dims) else strides   # the driver's: outer
  estr = list(getattr(tmap, "element_strides", None) or [1] * len(dims))
  swizzle = int(getattr(tmap, "swizzle", 0) or 0)
  if not 1 <= len(dims) <= 5:
    out.append(f"tensor map of rank {len(dims)}: the rank is 1 to 5")
  if any(not 0 < d <= 1 << 32 for d in dims):
    out.append(f"tensor map dims {dims}: each is non-zero and at most 2^32")
  if any(s % 16 or not 0 <= s < 1 << 40 for s in strides):
    out.append(f"tensor map strides {strides} bytes: each a multiple of 16 and below 2^40")
  if any(not 0 < b <= 256 for b in box):
    out.append(f"tensor map box {box}: each dimension non-zero and at most 256")
  if (box[-1] * eb) % 16:
    out.append(f"tensor map box inner dimension of {box[-1] * eb} bytes: a multiple of 16")
  if any(not 0 < e <= 8 for e in estr):
    out.append(f"tensor map element strides {estr}: each non-zero and at most 8")
  if swizzle and box[-1] * eb > swizzle:
    out.append(f"tensor map box inner dimension of {box[-1] * eb} bytes with the "
               f"{swizzle}-byte swizzle: at most {swizzle}")
  if global_address is not None and global_address % 16:
    out.append(f"tensor map global address {global_address:#x}: 16-byte aligned")
  return out


RULES = {
    "bulk-size": (size_multiple_of_16, _CCCL_BULK + " (ISA, recalled, cp.async.bulk: "
                  "\"Operand size ... specifies the amount of data to be copied, in terms of "
                  "number of bytes. size must be a multiple of 16.\")"),
    "bulk-align": (bulk_aligned, _CCCL_BULK),
    "tensor-smem-align": (tensor_smem_aligned, "(ISA, recalled, 5.5 Tensors, and the CUDA C++ "
                          "Programming Guide's TMA requirements) the shared memory address of "
                          "a tensor copy must be 128-byte aligned"),
    "tensor-map-align": (tensor_map_aligned, "CUDA driver API, cuTensorMapEncodeTiled: "
                         "\"tensorMap address must be aligned to 64 bytes.\""),
    "tensor-map-space": (tensor_map_space, "(ISA, recalled, cp.async.bulk.tensor) the operand "
                         "tensorMap is the generic address of the tensor-map object in .param "
                         "space, .const space or .global space"),
    "multicast-mask": (multicast_mask, "(ISA, recalled, cp.async.bulk / .tensor) \"Operand "
                       "ctaMask specifies the destination CTAs in the cluster such that each "
                       "bit position in the 16-bit ctaMask operand corresponds to the %ctaid "
                       "of the destination CTA.\" (the CTA's rank in the cluster: a bit "
                       "beyond the cluster names no CTA)"),
    "bulk-mbar-dst": (mbar_with_dst, "PTX ISA 9.7.9.25.5.1, cp.async.bulk.tensor: \"When "
                      ".cta_group::1 is specified, the mbarrier object mbar that is specified "
                      "must be in the shared memory of the same CTA as the shared memory "
                      "destination dstMem. When .cta_group::2 is specified, the mbarrier "
                      "object mbar can be in shared memory of either the same CTA as the "
                      "shared memory destination dstMem or in its peer-CTA. If .cta_group "
                      "is not specified, then it defaults to .cta_group::1.\" (the same CTA "
                      "for the non-tensor copies into .shared::cluster too: ISA, recalled; "
                      "CCCL names the shared::cta -> shared::cluster form's operand "
                      "rdsmem_bar)"),
    "bulk-shared-cta": (shared_cta_is_own, "(ISA, recalled, Addresses as Operands / shared "
                        "memory windows) an address in .shared::cta space is in the "
                        "executing CTA's window; one outside it is undefined behaviour"),
    "tensor-dims": (dims_match, "(ISA, recalled, cp.async.bulk.tensor) \"The dimension of the "
                    "tensor data is specified by the .dim modifier\", the tensor map's rank"),
    "tensor-store-coords": (store_coords_non_negative, "PTX ISA 9.7.9.25.5.1, Restriction "
                            "on Tensor Copy instructions: \"Following are the restrictions "
                            "on the .global.shared::cta direction: Starting co-ordinates for "
                            "Bounding Box (tensorCoords) must be non-negative\" (the "
                            "exception, .tile::scatter4 on sm_107f, is a mode the checker "
                            "refuses)"),
    "tensor-traversal-stride": (traversal_stride_inner, "PTX ISA 5.5.3.2, Traversal-Stride: "
                                "\"For non-interleaved layout, the traversal stride in "
                                "dimension 0 must always be 1.\""),
    "bulk-s2s-peer": (copy_to_peer, "PTX ISA, cp.async.bulk: \"When the source of the copy "
                      "is .shared::cta and the destination is .shared::cluster, the "
                      "destination has to be in the shared memory of a different CTA "
                      "within the cluster.\""),
    "tensor-map": (tensor_map_rules, "CUDA driver API, cuTensorMapEncodeTiled: globalDim "
                   "\"must be non-zero and less than or equal to 2^32\"; globalStrides \"must "
                   "be a multiple of 16 and less than 2^40\"; boxDim \"must be non-zero and "
                   "less than or equal to 256\", \"boxDim[0] * elementSizeInBytes( "
                   "tensorDataType ) must be a multiple of 16 bytes\"; elementStrides "
                   "\"must be non-zero and less than or equal to 8\"; with a swizzle \"the "
                   "bounding box inner dimension\" at most the swizzle span; globalAddress "
                   "\"must be 16 byte aligned\""),
}
