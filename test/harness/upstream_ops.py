"""Every kernel of jax's ``experimental/pallas/ops/gpu/``, as a user would compile it.

``KERNELS`` lists each Pallas MGPU kernel that one device runs, with the archs it is
written for and a small problem: ``case.make()`` returns ``(fn, arrays)``, exactly
what ``FUNCTION()`` returns for ``compile FILE.py:FUNCTION``, built from upstream's own
public entry point and ``TuningConfig`` (sizes cut to one or a few tiles, so that a
compile takes about a second).  ``MESH_KERNELS`` are the multi-device kernels, on a
one-device mesh (compiled relocatable: see the table).  ``NOT_APPLICABLE`` names every
other module of that folder with the reason it is not compiled here;
test/unit/test_upstream_ops.py checks that the three together cover the folder, so a
kernel that a new jax adds is never skipped silently.  docs/jax-versions.md ("Upstream's
kernels") tabulates this module.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
from typing import Callable

import numpy as np

__all__ = ["Case", "KERNELS", "MESH_KERNELS", "NOT_APPLICABLE", "PACKAGE", "module_of",
           "ops_modules", "RAGGED", "ragged_problem", "ragged_reference"]

PACKAGE = "jax.experimental.pallas.ops.gpu"
HOPPER, BLACKWELL = ("sm_90a",), ("sm_100a",)


@dataclasses.dataclass(frozen=True)
class Case:
  """One upstream kernel and problem.

  Attributes:
    name: the case's id (module, then variant).
    module: the module of ``PACKAGE`` that defines the kernel.
    archs: the targets it is written for (WGMMA: sm_90a; tcgen05: sm_100a).
    build: module -> (fn, arrays).
  """

  name: str
  module: str
  archs: tuple[str, ...]
  build: Callable

  def make(self):
    """``(fn, arrays)`` for ``compile_kernel(fn, *arrays, arch=...)``; raises
    ImportError where this jax has no such module."""
    return self.build(module_of(self.module))


def module_of(name: str):
  """The module ``name`` of ``PACKAGE`` (ImportError where this jax has none)."""
  return importlib.import_module(f"{PACKAGE}.{name}")


def ops_modules() -> list[str]:
  """The modules of ``PACKAGE`` in this jax (without ``__init__``)."""
  import pkgutil
  package = importlib.import_module(PACKAGE)
  return sorted(m.name for m in pkgutil.iter_modules(package.__path__))


def _zeros(*shapes_and_dtypes):
  return tuple(np.zeros(shape, dtype) for shape, dtype in shapes_and_dtypes)


def _f16(*shapes):
  return _zeros(*[(s, np.float16) for s in shapes])


def _hopper(cluster: bool):
  def build(mod):
    dim = mod.MatmulDimension
    config = mod.TuningConfig(tile_m=128, tile_n=128, tile_k=64, max_concurrent_steps=2,
                              cluster_dimension=dim.M if cluster else None)
    # (two consumer warpgroups split N: a CTA's tile is 128 x 256; a cluster along M
    # is two of them)
    a, b = _f16((256 if cluster else 128, 128), (128, 256))
    return (lambda x, y: mod.matmul(x, y, None, config)), (a, b)   # c: no bias
  return build


def _mixed(mod):
  import jax.numpy as jnp
  config = mod.TuningConfig(tile_m=128, tile_n=128, tile_k=64, max_concurrent_steps=2)
  a, b = np.zeros((128, 128), np.int8), np.zeros((128, 256), jnp.bfloat16)
  return (lambda x, y: mod.mixed_matmul_kernel(x, y, out_dtype=jnp.bfloat16, config=config),
          (a, b))


def _group_sizes(groups: int, total: int):
  return np.full((groups,), total // groups, np.int32)


def _ragged(transpose_rhs: bool, k: int = 128):
  def build(mod):
    m, n, g = 256, 128, 2
    lhs, = _f16((m, k))
    rhs, = _f16((g, n, k) if transpose_rhs else (g, k, n))
    fn = lambda x, y, s: mod.ragged_dot(x, y, group_sizes=s, block_m=64, block_n=64,
                                        block_k=64, max_concurrent_steps=2, grid_block_n=1,
                                        **({"transpose_rhs": True} if transpose_rhs else {}))
    return fn, (lhs, rhs, _group_sizes(g, m))
  return build


def _transposed_ragged(mod, k: int = 256):
  m, n, g = 128, 128, 2
  lhs, rhs = _f16((k, m), (k, n))
  fn = lambda x, y, s: mod.transposed_ragged_dot(x, y, group_sizes=s, block_m=64,
                                                 block_n=64, block_k=64,
                                                 max_concurrent_steps=2, grid_block_n=1)
  return fn, (lhs, rhs, _group_sizes(g, k))


def _attention(entry: str, causal: bool = False):
  """Forward attention; causal masking asks for the CUDA version (upstream refuses
  12.8.0 to 12.9.0, whose ptxas miscompiles it)."""
  def build(mod):
    config = mod.TuningConfig(block_q=64, block_kv=64, max_concurrent_steps=2,
                              causal=causal)
    q, k, v = _f16((1, 128, 2, 64), (1, 128, 2, 64), (1, 128, 2, 64))
    return functools.partial(getattr(mod, entry), config=config), (q, k, v)
  return build


def _blackwell_matmul(collective: bool):
  def build(mod):
    config = mod.TuningConfig(tile_m=128, tile_n=128, tile_k=64, max_concurrent_steps=2,
                              collective=collective)
    size = 512 if collective else 256   # a collective tile is 2x2 tiles of a CTA pair
    a, b = _f16((size, 128), (128, size))
    return functools.partial(mod.matmul_kernel, config=config), (a, b)
  return build


def _blackwell_ragged(mod):
  """Collective (a CTA pair): the kernel reads its cluster index (axis "x") whether or
  not it is collective, and names that axis only when it is (upstream, jax 0.10 to 0.12),
  so only the collective form traces."""
  matmul = module_of("blackwell_matmul_mgpu")
  config = mod.TuningConfig(tile_m=128, tile_n=128, tile_k=64, max_concurrent_steps=2,
                            collective=True, grid_tile_width=1,
                            grid_minor_dim=matmul.MatmulDimension.N)
  m, k, n, g = 512, 128, 256, 2
  a, b = _f16((m, k), (g, k, n))
  return (lambda x, y, s: mod.ragged_dot_kernel(x, y, s, config=config),
          (a, b, _group_sizes(g, m)))


KERNELS: tuple[Case, ...] = (
    Case("hopper_matmul", "hopper_matmul_mgpu", HOPPER, _hopper(cluster=False)),
    Case("hopper_matmul_cluster", "hopper_matmul_mgpu", HOPPER, _hopper(cluster=True)),
    Case("hopper_mixed_type_matmul", "hopper_mixed_type_matmul_mgpu", HOPPER, _mixed),
    Case("ragged_dot", "ragged_dot_mgpu", HOPPER, _ragged(transpose_rhs=False)),
    Case("ragged_dot_transpose_rhs", "ragged_dot_mgpu", HOPPER, _ragged(transpose_rhs=True)),
    Case("transposed_ragged_dot", "transposed_ragged_dot_mgpu", HOPPER, _transposed_ragged),
    Case("attention", "attention_mgpu", HOPPER, _attention("attention")),
    Case("attention_causal", "attention_mgpu", HOPPER, _attention("attention", causal=True)),
    Case("attention_pipeline_emitter", "attention_mgpu", HOPPER,
         _attention("attention_with_pipeline_emitter")),
    Case("blackwell_matmul", "blackwell_matmul_mgpu", BLACKWELL,
         _blackwell_matmul(collective=False)),
    Case("blackwell_matmul_collective", "blackwell_matmul_mgpu", BLACKWELL,
         _blackwell_matmul(collective=True)),
    Case("blackwell_ragged_dot", "blackwell_ragged_dot_mgpu", BLACKWELL, _blackwell_ragged),
)

def _on_one_device(body, *arrays):
  """``body`` (a collective over mesh axis "x") under ``jax.shard_map`` on a mesh of one
  device: the arrays are whole on it (replicated specs), ``lax.axis_size("x")`` is 1."""
  import jax
  from jax.sharding import PartitionSpec as P
  mesh = jax.make_mesh((1,), ("x",))
  specs = tuple(P(*([None] * a.ndim)) for a in arrays)
  fn = jax.shard_map(body, mesh=mesh, in_specs=specs, out_specs=specs[0], check_vma=False)
  return fn, arrays


def _all_gather(mod):
  return _on_one_device(lambda x: mod.all_gather(x, axis_name="x", num_blocks=2,
                                                 tile_size=1024), *_f16((256, 128)))


def _reduce_scatter(mod):
  return _on_one_device(lambda x: mod.reduce_scatter(x, axis_name="x", num_blocks=2,
                                                     tile_size=1024), *_f16((256, 128)))


def _collective_matmul(mod):
  hopper = module_of("hopper_matmul_mgpu")
  config = hopper.TuningConfig(tile_m=128, tile_n=128, tile_k=64, max_concurrent_steps=2)
  return _on_one_device(lambda a, b: mod.all_gather_lhs_matmul(a, b, "x", config=config),
                        *_f16((128, 128), (128, 256)))


# Multi-device kernels, on a one-device mesh.  Their PTX calls NVSHMEM's device functions
# (nvshmem_my_pe, nvshmemx_mc_ptr, ...), which upstream links from NVSHMEM's device bitcode
# (libnvshmem_device.bc) before ptxas; this toolchain links nothing and assembles such PTX
# relocatable (``Compiled.relocatable``: ptxas -c), leaving the calls to a link.
MESH_KERNELS: tuple[Case, ...] = (
    Case("all_gather", "all_gather_mgpu", HOPPER, _all_gather),
    Case("reduce_scatter", "reduce_scatter_mgpu", HOPPER, _reduce_scatter),
    Case("collective_matmul", "collective_matmul_mgpu", HOPPER, _collective_matmul),
)

# Modules of PACKAGE that are not compiled here, with the reason.
_TRITON = "a Pallas Triton kernel (jax.experimental.pallas.triton), not Mosaic GPU"
NOT_APPLICABLE: dict[str, str] = {
    "attention": _TRITON,
    "decode_attention": _TRITON,
    "paged_attention": _TRITON,
    "layer_norm": _TRITON,
    "rms_norm": _TRITON,
    "softmax": _TRITON,
}


# --- the ragged dots on values, for ``check`` (test_upstream_ops.py) ------------------

RAGGED = ("ragged_dot", "ragged_dot_transpose_rhs", "transposed_ragged_dot")


def ragged_problem(name: str, group_sizes, k: int | None = None, wgmma_wait: bool = False):
  """``(fn, arrays)`` for ``check``: the ``RAGGED`` case ``name`` with ``group_sizes``
  (int32) and small integers in the operands (every product and sum exact in f32, the
  result exact in f16).  ``k``: the contracting size (the case's where None; the
  transposed dot's groups split k, the others' split m).  ``wgmma_wait``: every
  ``plgpu.wgmma`` of the kernel followed by ``plgpu.wgmma_wait(1)``, while ``fn`` is
  traced: the wait upstream's ragged dots lack (hopper_matmul_mgpu has it, as
  ``plgpu.wgmma_wait(delay_release)``), without which a pipeline of more k steps than
  slots refills a slot that the previous step's WGMMA may still read."""
  from jax.experimental.pallas import mosaic_gpu as plgpu
  mod = module_of("transposed_ragged_dot_mgpu" if name == "transposed_ragged_dot"
                  else "ragged_dot_mgpu")
  if name == "transposed_ragged_dot":
    fn, zeros = _transposed_ragged(mod, **({} if k is None else {"k": k}))
  else:
    fn, zeros = _ragged(name == "ragged_dot_transpose_rhs", **({} if k is None else
                                                               {"k": k}))(mod)
  rng = np.random.default_rng(0)
  lhs, rhs = (rng.integers(-2, 3, z.shape).astype(np.float16) for z in zeros[:2])
  sizes = np.asarray(group_sizes, np.int32)
  if not wgmma_wait:
    return fn, (lhs, rhs, sizes)
  wgmma = plgpu.wgmma

  def waited(acc, a, b):
    wgmma(acc, a, b)
    plgpu.wgmma_wait(1)

  def fixed(x, y, s):
    plgpu.wgmma = waited
    try:
      return fn(x, y, s)
    finally:
      plgpu.wgmma = wgmma
  return fixed, (lhs, rhs, sizes)


def ragged_reference(name: str, lhs, rhs, group_sizes) -> np.ndarray:
  """NumPy's group-wise matmul of the ``RAGGED`` case ``name``, in float32: rows
  ``[start, end)`` of the group's span of ``lhs`` times the group's ``rhs``
  (``ragged_dot``, ``rhs[g]`` transposed for ``ragged_dot_transpose_rhs``), or for the
  transposed dot, per group ``lhs[start:end].T @ rhs[start:end]`` (spans of k)."""
  lhs, rhs = np.asarray(lhs, np.float32), np.asarray(rhs, np.float32)
  ends = np.cumsum(group_sizes)
  spans = list(zip(np.concatenate([[0], ends[:-1]]), ends))
  if name == "transposed_ragged_dot":
    return np.stack([lhs[s:e].T @ rhs[s:e] for s, e in spans])
  out = np.zeros((lhs.shape[0], rhs.shape[1 if name.endswith("transpose_rhs") else 2]),
                 np.float32)
  for g, (s, e) in enumerate(spans):
    out[s:e] = lhs[s:e] @ (rhs[g].T if name.endswith("transpose_rhs") else rhs[g])
  return out
