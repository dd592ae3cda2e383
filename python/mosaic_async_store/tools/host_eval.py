"""The evaluator behind ``host_tma``: a Mosaic GPU module's host ops over symbolic
addresses, and the TMA descriptors they encode.

``_Evaluator`` runs the host function's straight-line code, one line at a time, over
symbolic addresses (buffer j at (j + 1) << 40, the pointer table and the allocas in
windows of their own).  Its values are ints (addresses, sizes, indices), ``_Memref`` (a
strided memref), dicts (an LLVM struct, by position: a memref descriptor), ``_Block`` (a
loaded block of descriptors) and ``_Opaque`` (what it does not model).  The ops in
``_OPS`` run, one function each; any other op is refused by name where a descriptor
would depend on it (its results read, or it ran before a descriptor was encoded: it
might have written that memory), and ``mosaic_gpu_init_tma_im2col_desc`` always.

``_call`` makes a ``TensorMap`` of each ``mosaic_gpu_init_tma_desc``.  The runtime's
function takes (descriptor pointer, the tensor's first element, element-type code, rank,
sizes, strides in elements, swizzle bytes, box) with the arrays outermost first, as
NumPy orders them; it turns the strides into bytes, the swizzle 16 into "none", and
calls ``cuTensorMapEncodeTiled`` (jaxlib's mosaic/gpu runtime; the codes are
``launch_context._tma_dma_type``'s).

Apart from ``host_tma`` (what the host code means for the kernel: its maps, its
parameters in PTX order) because this is an interpreter of MLIR ops, one function per
op, that grows with every op Mosaic's host code comes to use.
"""

from __future__ import annotations

import dataclasses
import math
import re

from mosaic_async_store.check.tensor_map import TENSOR_MAP_BYTES, TensorMap
from mosaic_async_store.errors import AsyncStoreError, refuse

__all__: list[str] = []   # (host_tma's machinery: nothing here is public)

_BUFFER_SHIFT = 40
_TABLE = 1 << 62                 # %arg1: the buffers' pointers, 8 bytes each
_STACK = 1 << 61                 # the allocas, one after another, 64-aligned
# Element-type codes of mosaic_gpu_init_tma_desc: (bytes, dtype name); 0 and 8 are the
# packed 4- and 2-bit types (refused: a NumPy buffer holds one byte per element).
_ELEM_TYPES = {1: (1, "uint8"), 2: (2, "uint16"), 3: (4, "uint32"), 4: (8, "uint64"),
               5: (2, "float16"), 6: (4, "float32"), 7: (2, "bfloat16"), 9: (4, "int32"),
               10: (8, "int64")}
_SCALAR_BYTES = {"i1": 1, "i8": 1, "i16": 2, "i32": 4, "i64": 8, "index": 8, "f16": 2,
                 "bf16": 2, "f32": 4, "f64": 8, "!llvm.ptr": 8, "ptr": 8}
_LINE = re.compile(r"\s*(?:(?P<res>%[^=]*?)\s*=\s*)?(?P<op>[a-z_]+\.[\w.]+|call)\b\s*(?P<rest>.*)")
_NAME = re.compile(r"%[\w$.#-]+")


def _fail(what, why, fix="check this kernel's TMA another way, or report the op"):
  return refuse("fn", what, why, fix)


@dataclasses.dataclass
class _Memref:
  """A strided memref: aligned pointer (an address), offset, sizes and strides in
  elements, element bytes."""

  aligned: int
  offset: int
  sizes: tuple
  strides: tuple
  elem: int
  arg: int | None = None    # its from_kernel_arg_idx, where it is a kernel argument


@dataclasses.dataclass
class _Block:
  """A loaded block of descriptors: the maps at its 128-byte slots, in order."""

  maps: list


def _size_of(ty):
  ty = ty.strip()
  m = re.fullmatch(r"!llvm\.array<(\d+) x (.+)>", ty)
  if m:
    return int(m[1]) * _SCALAR_BYTES.get(m[2].strip(), 0)
  if ty.startswith("f8") or ty.startswith("i8"):
    return 1
  return _SCALAR_BYTES.get(ty, 0)


def _memref_type(text, passed=False):
  """(shape, element bytes, strides or None) of the first ``memref<...>`` in ``text``;
  ``passed``: a kernel argument's memref, which may hold sub-byte elements (element
  bytes 0) as long as no descriptor addresses its elements (``_element``)."""
  m = re.search(r"memref<([^,>]*)(?:,\s*strided<\[([^\]]*)\][^>]*>)?", text)
  *shape, elem = m[1].split("x")
  size = _size_of(elem)
  if not size and not passed:
    raise _fail(f"a memref of {elem}", "memrefs of byte-sized element types")
  strides = None if m[2] is None else tuple(int(s) for s in m[2].split(","))
  return tuple(int(d) for d in shape), size, strides


class _Evaluator:
  """The host function's ops over symbolic addresses (module doc)."""

  def __init__(self, nbuffers):
    self.env, self.kinds, self.memory, self.top, self.maps = {}, {}, {}, _STACK, []
    self.skipped = []   # ops without results outside _OPS (they may write memory)
    for i in range(nbuffers):
      self.memory[_TABLE + 8 * i] = (i + 1) << _BUFFER_SHIFT
    self.env["%arg1"] = _TABLE

  def val(self, tok):
    tok = tok.strip()
    if tok in self.env:
      value = self.env[tok]
      if isinstance(value, _Opaque):
        raise _fail(f"a TMA descriptor built from {tok}, made by `{value.text[:120]}`",
                    "descriptors built by the ops "
                    f"Mosaic's host code uses: {', '.join(sorted(_OPS))}")
      return value
    try:
      return int(tok)
    except ValueError:
      raise _fail(f"host code that reads {tok}", "values defined by the host function's "
                  "straight-line code before gpu.launch") from None

  def alloc(self, nbytes):
    at, self.top = self.top, self.top + -(-max(nbytes, 1) // 64) * 64
    return at

  def run(self, line):
    if not line.strip():
      return
    m = _LINE.fullmatch(line)
    if m is None:
      raise _fail(f"host code with `{line.strip()[:160]}`", "ops printed in their custom "
                  "form, one a line (Mosaic's host code)")
    op, rest = m["op"], m["rest"]
    names = []
    for r in (m["res"] or "").split(","):
      r = r.strip()
      if ":" in r:
        base, n = r.split(":")
        names += [f"{base}#{i}" for i in range(int(n))]
      elif r:
        names.append(r)
    handler = _OPS.get(op)
    if handler is None:   # refused where a descriptor depends on it (val, _call)
      out = [_Opaque(line.strip())] * len(names)
      if not names:
        self.skipped.append(line.strip())
    else:
      out = handler(self, rest)
    if names:
      out = list(out) if len(names) > 1 else [out]
      for n, v in zip(names, out):
        self.env[n], self.kinds[n] = v, op

  def operands(self, rest):
    return _NAME.findall(rest.split(":")[0])


class _Opaque:
  """A value the evaluation does not model (a float or vector constant Mosaic hoisted
  into the host function, the result of an op outside ``_OPS``): reading it to build
  a descriptor is refused, naming what made it (``_Evaluator.val``)."""

  def __init__(self, text):
    self.text = text


def _constant(ev, rest):
  m = re.match(r"\(?\s*(-?\d+|true|false)\b(?!\.)", rest)
  if m is None:
    return _Opaque(rest)
  return {"true": 1, "false": 0}[m[1]] if m[1] in ("true", "false") else int(m[1])


def _same(ev, rest):
  return ev.val(ev.operands(rest)[0])


def _binary(fn):
  def apply(ev, rest):
    a, b = ev.operands(rest)[:2]
    return fn(ev.val(a), ev.val(b))
  return apply


def _gep(ev, rest):
  m = re.match(r"(?:inbounds\s+)?(%[\w$.#-]+)\[([^\]]*)\].*->\s*!llvm\.ptr\s*,\s*(.+)$", rest)
  idx = m[2].split(",")
  if len(idx) != 1:
    raise _fail(f"a getelementptr with indices [{m[2]}]", "one index")
  size = _size_of(m[3])
  if not size:
    raise _fail(f"a getelementptr over {m[3]}", "byte-sized element types")
  return ev.val(m[1]) + ev.val(idx[0]) * size


def _load(ev, rest):
  addr = ev.val(ev.operands(rest)[0])
  ty = rest.split("->")[-1].strip()
  block = re.fullmatch(r"!llvm\.array<(\d+) x i8>", ty)
  if block:
    n, maps = int(block[1]) // TENSOR_MAP_BYTES, []
    for k in range(n):
      made = ev.memory.get(addr + k * TENSOR_MAP_BYTES)
      if not isinstance(made, TensorMap):
        raise _fail(f"a load of {block[1]} bytes whose slot {k} no "
                    "mosaic_gpu_init_tma_desc wrote", "descriptor blocks the host fills")
      maps.append(made)
    return _Block(maps)
  if addr not in ev.memory:
    return _Opaque(f"a load of {ty} from {addr:#x}, where the host code stored nothing")
  return ev.memory[addr]


def _store(ev, rest):
  value, addr = ev.operands(rest)[:2]
  ev.memory[ev.val(addr)] = ev.val(value)


def _alloca(ev, rest):
  m = re.match(r"(%[\w$.#-]+) x (!llvm\.array<[^>]*>|[\w!.]+)", rest)
  return ev.alloc(ev.val(m[1]) * _size_of(m[2]))


def _memref_alloca(ev, rest):
  shape, elem, _ = _memref_type(rest)
  strides = tuple(math.prod(shape[i + 1:]) for i in range(len(shape)))   # (row-major)
  return _Memref(ev.alloc(math.prod(shape) * elem), 0, shape, strides, elem)


def _memref_store(ev, rest):
  m = re.match(r"(%[\w$.#-]+)\s*,\s*(%[\w$.#-]+)\[([^\]]*)\]", rest)
  ref = ev.val(m[2])
  index = [ev.val(i) for i in m[3].split(",") if i.strip()]
  ev.memory[_element(ref, index)] = ev.val(m[1])


def _element(ref, index):
  if not ref.elem:   # (a sub-byte kernel argument: ``_memref_type(passed=True)``)
    raise _fail("an element address in a memref of sub-byte elements",
                "memrefs of byte-sized element types")
  return ref.aligned + (ref.offset + sum(i * s for i, s in zip(index, ref.strides))) * ref.elem


def _undef(ev, rest):
  return {}


def _position(text):
  return tuple(int(p) for p in text.split(","))


def _insertvalue(ev, rest):
  m = re.match(r"(%[\w$.#-]+)\s*,\s*(%[\w$.#-]+)\[([\d,\s]+)\]", rest)
  out = dict(ev.val(m[2]))
  out[_position(m[3])] = ev.val(m[1])
  return out


def _extractvalue(ev, rest):
  m = re.match(r"(%[\w$.#-]+)\[([\d,\s]+)\]", rest)
  struct, pos = ev.val(m[1]), _position(m[2])
  if pos not in struct:
    raise _fail(f"an extractvalue of position {list(pos)} nothing inserted",
                "scalar positions of memref descriptors")
  return struct[pos]


def _cast(ev, rest):
  operand = ev.operands(rest)[0]
  target = rest.split(" to ", 1)[1] if " to " in rest else ""
  value = ev.env.get(operand)
  if target.startswith("memref<") and isinstance(value, dict):   # a descriptor struct
    shape, elem, _ = _memref_type(target, passed=True)
    arg = re.search(r"mosaic_gpu\.from_kernel_arg_idx = (\d+)", rest)
    rank = len(shape)
    return _Memref(value[(1,)], value[(2,)], tuple(value[(3, i)] for i in range(rank)),
                   tuple(value[(4, i)] for i in range(rank)), elem,
                   None if arg is None else int(arg[1]))
  if target.startswith("!llvm.struct") and isinstance(value, _Memref):
    out = {(0,): value.aligned, (1,): value.aligned, (2,): value.offset}
    for i, (d, s) in enumerate(zip(value.sizes, value.strides)):
      out[(3, i)], out[(4, i)] = d, s
    return out
  return value   # (the stream's token: never read)


def _list(ev, text):
  return tuple(ev.val(v) for v in text.split(",") if v.strip())


def _reinterpret_cast(ev, rest):
  m = re.match(r"(%[\w$.#-]+) to offset: \[([^\]]*)\], sizes: \[([^\]]*)\], "
               r"strides: \[([^\]]*)\]", rest)
  ref = ev.val(m[1])
  return dataclasses.replace(ref, offset=_list(ev, m[2])[0], sizes=_list(ev, m[3]),
                             strides=_list(ev, m[4]), arg=None)


def _strided_metadata(ev, rest):
  ref = ev.val(ev.operands(rest)[0])
  base = _Memref(ref.aligned, 0, (), (), ref.elem)
  return [base, ref.offset, *ref.sizes, *ref.strides]


def _aligned_pointer(ev, rest):
  return ev.val(ev.operands(rest)[0]).aligned


def _expand_shape(ev, rest):
  m = re.match(r"(%[\w$.#-]+) \[(.*?)\]\s*(?:output_shape \[([^\]]*)\])?\s*:", rest)
  ref = ev.val(m[1])
  groups = [[int(d) for d in g.split(",")] for g in re.findall(r"\[([\d,\s]+)\]", m[2])]
  sizes = _list(ev, m[3]) if m[3] else _memref_type(rest.split(" into ")[1])[0]
  strides = [0] * len(sizes)
  for k, group in enumerate(groups):
    step = ref.strides[k]
    for d in reversed(group):
      strides[d], step = step, step * sizes[d]
  return dataclasses.replace(ref, sizes=tuple(sizes), strides=tuple(strides), arg=None)


def _transpose(ev, rest):
  m = re.match(r"(%[\w$.#-]+) \(([^)]*)\) -> \(([^)]*)\)", rest)
  ref, order = ev.val(m[1]), [int(d.strip()[1:]) for d in m[3].split(",")]
  return dataclasses.replace(ref, sizes=tuple(ref.sizes[d] for d in order),
                             strides=tuple(ref.strides[d] for d in order), arg=None)


def _subview(ev, rest):
  m = re.match(r"(%[\w$.#-]+)\[([^\]]*)\] \[([^\]]*)\] \[([^\]]*)\]", rest)
  ref = ev.val(m[1])
  offsets, sizes, steps = _list(ev, m[2]), _list(ev, m[3]), _list(ev, m[4])
  if len(_memref_type(rest.split(" to ")[-1])[0]) != len(sizes):
    raise _fail("a rank-reducing memref.subview in the host code", "subviews that keep "
                "the rank")
  return dataclasses.replace(
      ref, offset=ref.offset + sum(o * s for o, s in zip(offsets, ref.strides)),
      sizes=sizes, strides=tuple(s * t for s, t in zip(ref.strides, steps)), arg=None)


def _call(ev, rest):
  callee = re.match(r"@([\w$.]+)", rest)[1]
  if callee == "mosaic_gpu_init_tma_im2col_desc":
    raise _fail("a TMA descriptor made by mosaic_gpu_init_tma_im2col_desc (im2col)",
                "tiled TMA descriptors (mosaic_gpu_init_tma_desc): im2col ones are not "
                "modelled", "check the kernel with tiled copies, or report it")
  if callee != "mosaic_gpu_init_tma_desc":   # refused if a descriptor follows it
    ev.skipped.append(f"call @{callee}")
    return
  if ev.skipped:
    raise _fail(f"host code that runs `{ev.skipped[0][:120]}` before a TMA descriptor is "
                "encoded", f"descriptors built by the ops {', '.join(sorted(_OPS))} only "
                "(anything else might write the memory a descriptor reads)")
  desc, base, code, rank, sizes, strides, swizzle, window = (
      ev.val(v) for v in ev.operands(rest.split("(", 1)[1])[:8])
  read = lambda at: tuple(ev.memory[at + 8 * i] for i in range(rank))
  if code not in _ELEM_TYPES:
    raise _fail(f"a TMA descriptor of element-type code {code}", "byte-sized element "
                f"types (codes {sorted(_ELEM_TYPES)}; 0 and 8 are packed sub-byte types)")
  elem, dtype = _ELEM_TYPES[code]
  buffer, offset = (base >> _BUFFER_SHIFT) - 1, base & ((1 << _BUFFER_SHIFT) - 1)
  if not 0 <= buffer < len(ev.arrays) or base >= _STACK:
    raise _fail("a TMA descriptor over memory that is not a kernel buffer",
                "descriptors over the kernel's inputs and outputs")
  array = ev.arrays[buffer]
  try:
    tmap = TensorMap(array, offset, dtype, read(sizes), tuple(s * elem for s in read(strides)),
                     read(window), swizzle=0 if swizzle == 16 else swizzle)
  except AsyncStoreError as e:   # (which buffer: a wrong binding shows as a wrong array)
    held = "" if array is None else f", a {array.dtype} array of shape {array.shape}"
    raise AsyncStoreError(f"the TMA descriptor over buffer {buffer} of the kernel (its "
                          f"inputs, then its outputs, in its order{held}): {e}",
                          param=e.param, value=e.value) from None
  if tmap.elem_bytes != elem:
    raise _fail(f"a {dtype} descriptor", "element types NumPy sizes as the runtime does")
  ev.memory[desc] = tmap
  ev.maps.append(tmap)


_OPS = {
    "arith.constant": _constant, "llvm.mlir.constant": _constant,
    "arith.index_cast": _same, "arith.index_castui": _same, "arith.extui": _same,
    "llvm.ptrtoint": _same, "llvm.inttoptr": _same,
    "arith.addi": _binary(int.__add__), "llvm.add": _binary(int.__add__),
    "arith.muli": _binary(int.__mul__), "llvm.mul": _binary(int.__mul__),
    "llvm.getelementptr": _gep, "llvm.load": _load, "llvm.store": _store,
    "llvm.alloca": _alloca, "memref.alloca": _memref_alloca, "memref.store": _memref_store,
    "llvm.mlir.undef": _undef, "llvm.mlir.poison": _undef, "llvm.mlir.zero": _undef, "llvm.insertvalue": _insertvalue,
    "llvm.extractvalue": _extractvalue, "builtin.unrealized_conversion_cast": _cast,
    "memref.reinterpret_cast": _reinterpret_cast,
    "memref.extract_strided_metadata": _strided_metadata,
    "memref.extract_aligned_pointer_as_index": _aligned_pointer,
    "memref.expand_shape": _expand_shape, "memref.transpose": _transpose,
    "memref.subview": _subview, "call": _call, "func.call": _call,
}
