"""The TMA descriptors a Mosaic GPU module's host code builds, as ``TensorMap``s, and
the kernel's parameters in PTX order.

Mosaic lowers a kernel into a module whose host function (``@..._mosaic_gpu(%arg0,
%arg1)``: the stream, and a pointer to the buffers' pointers, inputs then outputs)
builds a memref descriptor per buffer (a cast tagged ``mosaic_gpu.from_kernel_arg_idx
= i``), encodes each TMA descriptor into a 64-aligned ``llvm.alloca`` of ``128 * n``
bytes with ``mosaic_gpu_init_tma_desc`` and loads those bytes as one value that the
``gpu.launch`` body uses (what that runtime function encodes: ``host_eval``).

``evaluate`` runs the host function's straight-line code up to ``gpu.launch`` over
symbolic addresses (``host_eval``'s evaluator: the ops in its ``_OPS``; any other op is
refused by name where a descriptor would depend on it, and
``mosaic_gpu_init_tma_im2col_desc`` always).  ``launch_parameters`` then lists what the
launch body uses from outside it, in order of first use, as the kernel's parameters:
a buffer's memref (its index) or a loaded descriptor block (its maps, in order);
constants are sunk into the kernel by the outlining and are no parameters.
"""

from __future__ import annotations

import dataclasses
import re

from mosaic_async_store.check.tensor_map import TensorMap
from mosaic_async_store.tools.host_eval import _LINE, _NAME, _Block, _Evaluator, _Memref, _fail

__all__ = ["evaluate", "tensor_maps", "launch_parameters", "Host"]


@dataclasses.dataclass
class Host:
  """``evaluate``'s result: ``maps`` (one per ``mosaic_gpu_init_tma_desc`` call, in
  order), ``values`` (every SSA value of the host code before the launch), ``kinds``
  (each value's op), ``launch_body`` (the launch region's text)."""

  maps: list
  values: dict
  kinds: dict
  launch_body: str


def _host_code(text):
  """(the host function's lines before gpu.launch, the launch region's text)."""
  launch = re.search(r"^(?P<indent>[ \t]*)(?:%[\w$.#-]+ = )?gpu\.launch\b[^\n]*\n", text, re.M)
  if launch is None:
    raise _fail("a module with no gpu.launch", "a Mosaic GPU kernel's module",
                "pass the lowered module of a plgpu.kernel / pallas_call / as_gpu_kernel")
  head = text.rfind("func.func @", 0, launch.start())
  lines = text[text.index("\n", head) + 1:launch.start()].splitlines()
  close = re.compile("^" + launch["indent"] + r"\}", re.M).search(text, launch.end())
  return lines, text[launch.end():close.start() if close else len(text)]


def evaluate(module, buffers) -> Host:
  """Runs the host code of ``module`` (an ``ir.Module`` or its text) before its
  ``gpu.launch`` over the kernel's ``buffers`` (inputs then outputs, NumPy arrays)."""
  text = module if isinstance(module, str) else str(module)
  lines, body = _host_code(text)
  ev = _Evaluator(len(buffers))
  ev.arrays = list(buffers)
  for line in lines:
    ev.run(line)
  return Host(ev.maps, ev.env, ev.kinds, body)


def tensor_maps(module, buffers) -> list[TensorMap]:
  """One ``TensorMap`` per ``mosaic_gpu_init_tma_desc`` call of the host code, in order."""
  return evaluate(module, buffers).maps


# Ops that the outlining sinks into the kernel (constant-like: ``m_Constant``), so that
# their values are never kernel parameters.
_SUNK = ("arith.constant", "llvm.mlir.constant", "llvm.mlir.undef", "llvm.mlir.poison",
         "llvm.mlir.zero", "ub.poison")
# Ops without side effects (none, or reads only): unused, canonicalize erases them
# before the outlining, and the values they use are then no parameters.
_PURE = re.compile(r"(arith|math|index|vector\.(broadcast|splat|extract|insert|shape_cast|"
                   r"load|bitcast|extract_strided_slice|insert_strided_slice))\.?|"
                   r"memref\.(reinterpret_cast|subview|expand_shape|collapse_shape|transpose|"
                   r"cast|view|extract_strided_metadata|extract_aligned_pointer_as_index|"
                   r"dim|load)$|builtin\.unrealized_conversion_cast$|llvm\.(extractvalue|"
                   r"insertvalue|getelementptr|ptrtoint|inttoptr|bitcast|addrspacecast|"
                   r"mlir\.\w+|load)$|gpu\.(thread_id|block_id|block_dim|grid_dim|"
                   r"cluster_\w+|dynamic_shared_memory)$|nvvm\.read\.ptx\.sreg\.[\w.]+$")


def live_uses(body: str) -> list[str]:
  """The values the launch region ``body`` uses, in order of first use, leaving out
  the uses by ops that are dead (pure, every result unused: the canonicalization
  that runs before the outlining erases them, and their operands with them)."""
  ops = []
  for line in body.splitlines():
    m = _LINE.fullmatch(line)
    results = set() if m is None or not m["res"] else \
        {n.split(":")[0] for n in _NAME.findall(m["res"])}
    uses = _NAME.findall(m["rest"] if m is not None and m["res"] else line)
    pure = m is not None and bool(results) and bool(_PURE.match(m["op"]))
    ops.append([results, uses, pure, True])
  count = {}
  for _, uses, _, _ in ops:
    for n in uses:
      count[n.split("#")[0]] = count.get(n.split("#")[0], 0) + 1
  changed = True
  while changed:
    changed = False
    for op in ops:
      results, uses, pure, live = op
      if live and pure and not any(count.get(r, 0) for r in results):
        op[3], changed = False, True
        for n in uses:
          count[n.split("#")[0]] -= 1
  return list(dict.fromkeys(n for _, uses, _, live in ops if live for n in uses))


def launch_parameters(module, buffers) -> list:
  """The kernel's arguments in PTX parameter order: for each value the launch body
  uses from outside it, in order of first use, a buffer's memref as its index in
  ``buffers`` (an int: a ``Memref`` parameter) or a descriptor block as its maps
  (``TensorMap``s, consecutive: one ``.b8[128 * n]`` parameter).  Constants (sunk into
  the kernel) are skipped; any other value is refused by name."""
  host, out, seen = evaluate(module, buffers), [], set()
  for name in live_uses(host.launch_body):
    if name in seen or name not in host.values:
      continue
    seen.add(name)
    value, kind = host.values[name], host.kinds[name]
    if kind in _SUNK:
      continue
    if isinstance(value, _Memref) and value.arg is not None:
      out.append(value.arg)
    elif isinstance(value, _Block):
      out.extend(value.maps)
    else:
      raise _fail(f"a kernel that uses the host's {name} (made by {kind}) inside "
                  "gpu.launch", "kernel parameters that are the buffers' memrefs or TMA "
                  "descriptor blocks")
  return out
