"""Everything that depends on the jax version lives here.

CI runs jax 0.10.2, 0.11.2, 0.12.0.1 and 0.12.1 (docs/jax-versions.md).  Every import of
a private ``jax._src`` module, and every upstream name that moved or changed
shape between those versions, goes through a function in this file so that the
rest of the project imports only from here.  Imports are lazy: the planner must work (and
give clear errors) before anything heavy is loaded.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools

__all__ = [
    "jax_version", "fragmented_array", "mosaic_gpu", "mosaic_utils",
    "make_ir_context",
]


def jax_version() -> tuple[int, ...]:
  import jax
  return tuple(int(p) for p in jax.__version__.split(".")[:3] if p.isdigit())


@functools.cache
def mosaic_gpu():
  """The public Mosaic GPU package (``jax.experimental.mosaic.gpu``)."""
  from jax.experimental.mosaic import gpu
  return gpu


@functools.cache
def fragmented_array():
  """Upstream's module with FragmentedArray and the layout classes."""
  from jax.experimental.mosaic.gpu import fragmented_array as fa
  return fa


@functools.cache
def mosaic_utils():
  """Upstream's Mosaic GPU utils (memref_ptr, BarrierRef, ...)."""
  from jax.experimental.mosaic.gpu import utils
  return utils


def make_ir_context():
  """A new MLIR context with every dialect jax registers.

  A bare ``ir.Context()`` segfaults as soon as NVVM/LLVM types are built,
  because the dialects are not loaded; this is the context jax itself uses.
  jax 0.11's ``make_ir_context`` hands out a cached thread-local context (up to
  ten times); entering that one again while it is current corrupts memory at
  exit, and a caller asking for a context of its own would silently share one.
  So on 0.11 the uncached ``_create_ir_context`` is used: every call gets a
  fresh context, as on jax 0.10.
  """
  from jax._src.interpreters import mlir as jax_mlir  # private: jax 0.10 and 0.11
  fresh = getattr(jax_mlir, "_create_ir_context", None)  # jax 0.11: uncached
  if fresh is None and jax_version() >= (0, 11):
    import warnings
    warnings.warn("jax's uncached _create_ir_context is gone: IR contexts may be shared "
                  "(see compat.make_ir_context)", RuntimeWarning, stacklevel=2)
  return fresh() if fresh is not None else jax_mlir.make_ir_context()


def mosaic_gpu_core():
  """Upstream's ``jax.experimental.mosaic.gpu.core``.

  It holds ``_mosaic_gpu_lowering_rule`` (private; Pallas calls it as a
  module attribute), ``mosaic_gpu_p`` (the primitive ``as_gpu_kernel`` binds) and
  ``_kernel_to_module``.
  """
  from jax.experimental.mosaic.gpu import core  # private names: jax 0.10.2
  return core


def _mosaic_gpu_rule_table() -> dict:
  """jax's table of lowering rules registered for CUDA, by primitive (the private
  ``jax._src.interpreters.mlir._platform_specific_lowerings["cuda"]``, jax 0.10 .. 0.12;
  each entry a dataclass whose ``rule`` is the function)."""
  from jax._src.interpreters import mlir as jax_mlir   # private: jax 0.10 .. 0.12
  return jax_mlir._platform_specific_lowerings["cuda"]


def mosaic_gpu_lowering_rules() -> tuple:
  """(the rule Pallas MGPU calls by name, the rule registered for ``as_gpu_kernel``'s
  primitive or None): upstream's Mosaic GPU lowering on its two routes, as they are now
  (``mosaic_gpu_lowering_observed`` wraps both for a while)."""
  core = mosaic_gpu_core()
  entry = _mosaic_gpu_rule_table().get(core.mosaic_gpu_p)
  return core._mosaic_gpu_lowering_rule, (entry.rule if entry is not None else None)


@contextlib.contextmanager
def mosaic_gpu_lowering_observed(observe):
  """While active, ``observe(module)`` sees the Mosaic GPU module of every kernel lowered
  for CUDA, before upstream's rule serializes it into its custom call; the rule then
  runs as before.

  Kernels reach that rule two ways, on jax 0.10 to 0.12 alike: Pallas MGPU
  (``plgpu.kernel``, ``pallas_call``) calls ``core._mosaic_gpu_lowering_rule`` by its
  module attribute; ``mgpu.as_gpu_kernel`` binds ``core.mosaic_gpu_p``, whose "cuda"
  lowering jax looks up in its table of registered rules (``_mosaic_gpu_rule_table``),
  which holds the function itself, not its name.  Both are wrapped, and both restored on
  exit (the table's entry as it was).
  """
  core = mosaic_gpu_core()
  by_name = core._mosaic_gpu_lowering_rule
  table = _mosaic_gpu_rule_table()
  entry = table.get(core.mosaic_gpu_p)

  def wrapping(rule):
    def observed(ctx, *operands, module, **kwargs):
      observe(module)
      return rule(ctx, *operands, module=module, **kwargs)
    return observed

  core._mosaic_gpu_lowering_rule = wrapping(by_name)
  if entry is not None:
    table[core.mosaic_gpu_p] = dataclasses.replace(entry, rule=wrapping(entry.rule))
  try:
    yield
  finally:
    core._mosaic_gpu_lowering_rule = by_name
    if entry is not None:
      table[core.mosaic_gpu_p] = entry


def kernel_to_module(body, grid, block, in_shape, out_shape,
                     smem_scratch_shape, **kwargs):
  """Builds a Mosaic GPU module without compiling it (upstream's private
  ``_kernel_to_module``); needs an active MLIR context and location.

  Returns upstream's tuple: (module, in_shape, inout_shape, out_shape,
  unwrap_output_tuple, is_device_collective) in jax 0.10.2.
  """
  return mosaic_gpu_core()._kernel_to_module(
      body, grid, block, in_shape, out_shape, smem_scratch_shape, **kwargs)


def enable_x64():
  """Context manager enabling 64-bit dtypes while a kernel is built.

  Without it jax silently truncates float64/int64 buffers to 32 bits.
  ``jax.enable_x64`` is the public spelling in jax 0.10 and 0.11.
  """
  import jax
  return jax.enable_x64(True)


def dtype_to_ir_type(dtype):
  """jax's NumPy dtype -> MLIR element type (private ``jax._src``; jax 0.10 and 0.11)."""
  from jax._src.interpreters import mlir as jax_mlir
  return jax_mlir.dtype_to_ir_type(dtype)


@functools.cache
def pallas_internals():
  """The private Pallas MGPU and Mosaic modules the Pallas integration touches.

  Returned as one namespace so that a rename between jax versions is fixed
  here only.  (jax 0.10.2; see docs/jax-versions.md for 0.11.x notes.)
  """
  import types

  from jax._src import core as jax_core
  from jax._src import state
  from jax._src import tree_util
  from jax._src import util
  from jax._src.pallas import core as pallas_core
  from jax._src.pallas.mosaic_gpu import core as gpu_core
  from jax._src.pallas.mosaic_gpu import lowering as gpu_lowering
  from jax._src.pallas.mosaic_gpu import primitives as gpu_primitives
  from jax._src.state import primitives as state_primitives
  from jax._src.state import types as state_types
  from jax.experimental.mosaic.gpu import dialect_lowering, inference_utils
  from jax.experimental.mosaic.gpu import layout_inference, layouts
  return types.SimpleNamespace(
      jax_core=jax_core, state=state, tree_util=tree_util, util=util,
      pallas_core=pallas_core, gpu_core=gpu_core, lowering=gpu_lowering,
      primitives=gpu_primitives, state_primitives=state_primitives,
      state_types=state_types, dialect_lowering=dialect_lowering,
      inference_utils=inference_utils, layout_inference=layout_inference,
      layouts=layouts)


def typeof(x):
  """jax's abstract value of ``x``: ``core.typeof`` (jax 0.10, 0.11), ``get_aval`` before."""
  core = pallas_internals().jax_core
  return (getattr(core, "typeof", None) or core.get_aval)(x)


def axis_names_in_scope() -> tuple:
  """The axis names bound where a kernel body is being traced (a Pallas kernel's
  grid and cluster names); () where this jax's axis env cannot list them."""
  env = pallas_internals().jax_core.get_axis_env()
  return tuple(env.axis_names()) if hasattr(env, "axis_names") else ()


def register_lowering_rule(prim, lowering_semantics, primitive_semantics=None):
  """Pallas MGPU's decorator registering ``prim``'s lowering rule for a semantics
  (upstream's ``lowering.register_lowering_rule``, private; jax 0.10.2, and the same
  signature in a later jax's type stub; not run on 0.11 here).  ``primitive_semantics``
  defaults to Warpgroup, as upstream's does."""
  p = pallas_internals()
  if primitive_semantics is None:
    primitive_semantics = p.gpu_core.PrimitiveSemantics.Warpgroup
  return p.lowering.register_lowering_rule(prim, lowering_semantics, primitive_semantics)


def register_dialect_lowering(op_name: str):
  """Mosaic GPU's decorator registering a dialect op's lowering rule
  (``dialect_lowering._register_lowering``, private; jax 0.10.2 and older; not run on
  0.11 here).  It writes the table that ``dialect_lowering_table`` reads."""
  return pallas_internals().dialect_lowering._register_lowering(op_name)


def rule_tables_with(prim) -> dict:
  """Every Pallas MGPU rule table that has a rule for ``prim``, by (lowering,
  primitive) semantics: Lane, Warpgroup and, where this jax registers them, the
  Warp-primitive combinations (``LANExWARP_SEMANTICS``, ``WGxWARP_SEMANTICS``)."""
  return {key: table for key, table in pallas_internals().lowering.mosaic_lowering_rules.items()
          if prim in table}


def dialect_lowering_table() -> dict:
  """Mosaic's dialect-op lowering rules, keyed by operation name."""
  return pallas_internals().dialect_lowering._lowerings


def layout_constraints():
  """Mosaic's layout-inference constraint classes (``constraints``, private) and its
  table of per-op constraint derivation rules, keyed by operation name."""
  from jax.experimental.mosaic.gpu import constraints
  return constraints, pallas_internals().layout_inference._constraint_system_derivation_rules


def transfer_optimized_tries(optimized) -> tuple[bool, ...]:
  """The conflict-free requirements, in order of preference, that a layout-inference
  transfer constraint's ``optimized`` admits.

  jax 0.10 and 0.11: an ``OptimizedTransferKind``, OPTIMIZED, UNOPTIMIZED or
  DOWNGRADABLE (an unset ``optimized``: conflict-free where possible, else with
  conflicts).  jax 0.12: a plain bool, unset meaning "optimized required"."""
  from jax.experimental.mosaic.gpu import constraints
  kinds = getattr(constraints, "OptimizedTransferKind", None)
  if kinds is None:
    return (bool(optimized),)
  return {kinds.OPTIMIZED: (True,), kinds.UNOPTIMIZED: (False,)}.get(optimized, (True, False))


def transfer_optimized_values() -> dict[str, object]:
  """This jax's values of a transfer constraint's ``optimized`` by meaning:
  ``required``, ``unoptimized`` and, on jax 0.10 and 0.11 only, ``downgradable``."""
  from jax.experimental.mosaic.gpu import constraints
  kinds = getattr(constraints, "OptimizedTransferKind", None)
  if kinds is None:
    return {"required": True, "unoptimized": False}
  return {"required": kinds.OPTIMIZED, "unoptimized": kinds.UNOPTIMIZED,
          "downgradable": kinds.DOWNGRADABLE}


def unset_optimized_downgrades() -> bool:
  """Whether a dialect store op with no ``optimized`` attribute may fall back to a
  store with bank conflicts: yes on jax 0.10 and 0.11 (upstream's "downgradable"),
  no on 0.12, whose dialect lowering reads unset as ``optimized=True``."""
  from jax.experimental.mosaic.gpu import constraints
  return hasattr(constraints, "OptimizedTransferKind")


def vector_store_constraints(ctx, op):
  """Upstream's constraint system of a register -> SMEM store op, before its
  async-store extras (``layout_inference._vector_store_constraint_system``; jax 0.10.2
  and 0.11.2)."""
  return pallas_internals().layout_inference._vector_store_constraint_system(ctx, op)


def smem_tiling_and_swizzle(smem, bitwidth: int) -> tuple[tuple[int, ...], int | None]:
  """(tiling, swizzle bytes or None) of the SMEM side that ``IsTransferableSmemRegisters``
  hands to ``_is_supported_smem_transfer``.  jax 0.11 passes ``SMEMTransforms``
  (tiling and swizzle); jax 0.10 the ``TileTransform`` (or None) alone, whose swizzle
  upstream derives from the minor tile bytes (``compute_swizzle``: 32, 64, 128, else 16)."""
  if hasattr(smem, "swizzle"):  # jax 0.11: SMEMTransforms
    tiling = tuple(smem.tiling.tiling) if smem.tiling is not None else ()
    return tiling, (int(smem.swizzle) if smem.swizzle else None)
  if smem is None:
    return (), None
  tiling = tuple(smem.tiling)
  return tiling, pallas_internals().inference_utils.compute_swizzle(tiling[-1], bitwidth)


def tile_strides(strides, tiling) -> tuple[int, ...]:
  """A ref's strides after tiling (``dialect_lowering.tile_strides``, private)."""
  return tuple(pallas_internals().dialect_lowering.tile_strides(tuple(strides), tuple(tiling)))


def gpu_printf(fmt: str, *args) -> None:
  """``gpu.printf``; jaxlib's Python wrapper takes the values as varargs."""
  from jaxlib.mlir.dialects import gpu
  try:
    gpu.printf(fmt, *args)
  except TypeError:  # an ODS-style signature: printf(format, args)
    gpu.printf(fmt, list(args))


def upstream_store_errors() -> tuple[type[BaseException], ...]:
  """Exception types upstream's store_tiled_async refuses a configuration with.

  jax 0.11 (main) raises ``UnsupportedTransferError``, a plain Exception, where
  0.10.2 raised ValueError; both are listed when they exist.
  """
  fa = fragmented_array()
  names = ("TransferPlanDerivationError", "UnsupportedTransferError")
  return (ValueError, NotImplementedError) + tuple(
      getattr(fa, n) for n in names if hasattr(fa, n))


def transpose_smem_ref(ref, permutation):
  """A transposed view of a Pallas SMEM ref (``plgpu.transpose_ref`` without its check).

  jax 0.11.2's ``plgpu.transpose_ref`` first reads ``ref.memory_space``, which
  0.11 no longer allows on traced refs ("Use jax.typeof(x).memory_space
  instead"), so it fails for every SMEM ref in a kernel body.  The transpose
  itself, ``ref.transpose``, is the same in jax 0.10 and 0.11.
  """
  return ref.transpose(tuple(permutation))


def dialect_lowering_entry_points() -> list[tuple[object, str]]:
  """``(module, attribute)`` of every ``lower_mgpu_dialect`` that upstream calls.

  jax 0.10's Pallas calls ``mgpu.lower_mgpu_dialect``; jax 0.11 leaves the
  dialect to Mosaic's core, which calls ``dialect_lowering.lower_mgpu_dialect``.
  A hook (the lit test that prints the op before it is lowered) wraps both.
  """
  return [(mosaic_gpu(), "lower_mgpu_dialect"),
          (pallas_internals().dialect_lowering, "lower_mgpu_dialect")]


def pallas_load(ref, **kwargs):
  """``plgpu.load`` of a whole ref into registers, spelled for this jax.

  jax 0.10 requires the index argument (``plgpu.load(ref, (), ...)``); jax
  0.11 makes it optional and warns that passing it is deprecated.
  """
  from jax.experimental.pallas import mosaic_gpu as plgpu
  if jax_version() >= (0, 11):
    return plgpu.load(ref, **kwargs)
  return plgpu.load(ref, (), **kwargs)


def pallas_store(ref, value, *, optimized: bool = False) -> None:
  """Stores the registers ``value`` into the whole of ``ref`` (GMEM or SMEM) in a
  Pallas MGPU kernel, with ``optimized`` as this jax understands it.

  jax 0.12 plans a GMEM store as optimized unless told otherwise
  (``plgpu.store(ref, value, optimized=False)``) and refuses one that does not
  write whole 32-byte sectors per instruction; jax 0.10 and 0.11 have no
  ``plgpu.store``, and ``ref[...] = value`` stores unoptimized."""
  from jax.experimental.pallas import mosaic_gpu as plgpu
  store = getattr(plgpu, "store", None)
  if store is None:
    ref[...] = value
  else:
    store(ref, value, optimized=optimized)


def barrier_arrive_operands(flat_args, params) -> tuple[list, object]:
  """``(flat transforms, predicate)`` of a Pallas ``barrier_arrive`` equation's operands
  after the barrier, the predicate as an ``i1`` ``ir.Value`` or None.

  jax 0.12 adds ``plgpu.barrier_arrive(b, predicate=...)``: the predicate is the last
  operand and the parameter ``has_user_predicate`` says so; jax 0.10 has neither, and
  every operand is a transform.  Needs the lowering's insertion point (the conversion
  of a Python or traced bool to ``i1`` emits IR, as upstream's rule does).
  """
  flat = list(flat_args)
  if not params.get("has_user_predicate", False):
    return flat, None
  import jax.numpy as jnp
  *flat, user_predicate = flat
  return flat, pallas_internals().lowering._ensure_ir_value(user_predicate, jnp.bool)


# pl.pallas_call's arguments that upstream's Mosaic GPU pallas_call shim (jax >= 0.11)
# takes, and those that do not change the kernel it builds (a name, debug printing,
# metadata and a cost estimate for XLA).
_SHIM_ARGS = ("grid", "in_specs", "out_specs", "scratch_shapes")
_IGNORED_ARGS = ("name", "debug", "metadata", "cost_estimate")


def pallas_call_shim():
  """Upstream's current Mosaic GPU path for ``pl.pallas_call`` (jax >= 0.11:
  ``jax._src.pallas.mosaic_gpu.pallas_call.pallas_call``, which builds the call from
  ``plgpu.kernel`` and ``emit_pipeline``), or None where ``pl.pallas_call`` still has
  a Mosaic GPU lowering rule of its own (jax 0.10)."""
  try:
    from jax._src.pallas.mosaic_gpu import pallas_call as shim  # private: jax 0.11, 0.12
  except ImportError:
    return None
  from jax._src.pallas import core as pallas_core
  from jax._src.pallas.mosaic_gpu import core as gpu_core
  if pallas_core.get_lowering_rule(gpu_core.CompilerParams, "gpu") is not None:
    return None   # a jax that lowers pallas_call for Mosaic GPU itself
  return shim.pallas_call


@contextlib.contextmanager
def mosaic_gpu_pallas_call():
  """While active, ``pl.pallas_call(..., compiler_params=plgpu.CompilerParams(...))``
  goes through upstream's current Mosaic GPU path (``pallas_call_shim``).

  jax 0.11 and 0.12 dropped ``pallas_call``'s Mosaic GPU lowering rule (lowering
  one dies on ``assert rule is not None``); upstream's own tests build such calls
  with the shim instead.  Calls made while this is active are routed there; a
  ``pallas_call`` built before it (whose lowering would hit the assertion) is
  refused with an AsyncStoreError that says how to fix it.  jax 0.10: nothing to do.
  """
  shim = pallas_call_shim()
  if shim is None:
    yield
    return
  import jax.experimental.pallas as pl
  from jax._src.pallas import core as pallas_core
  from jax._src.pallas import pallas_call as pallas_call_module
  from jax._src.pallas.mosaic_gpu import core as gpu_core
  original = pallas_call_module.pallas_call

  def routed(kernel, out_shape, *, compiler_params=None, **kwargs):
    if not isinstance(compiler_params, gpu_core.CompilerParams):
      return original(kernel, out_shape, compiler_params=compiler_params, **kwargs)
    return shim(kernel, out_shape, compiler_params=compiler_params,
                **_shim_kwargs(kwargs))

  def prebuilt(*_, **__):
    from mosaic_async_store.errors import refuse
    raise refuse("fn", "a pl.pallas_call with plgpu.CompilerParams built before the "
                 "check or compile began", f"on jax {'.'.join(map(str, jax_version()))},"
                 " a pallas_call that is built while fn is traced (jax dropped its Mosaic "
                 "GPU lowering rule; this project routes such calls through upstream's "
                 "plgpu.kernel + emit_pipeline path)", "call pl.pallas_call inside fn "
                 "(or inside FUNCTION for the CLI), or use plgpu.kernel")

  rules = pallas_core._backend_lowering_rules   # private: jax 0.11, 0.12
  outer = rules.get(gpu_core.CompilerParams)   # an enclosing one's (checking() nests this)
  pl.pallas_call = pallas_call_module.pallas_call = routed
  rules[gpu_core.CompilerParams] = (prebuilt, "gpu")
  try:
    yield
  finally:
    pl.pallas_call = pallas_call_module.pallas_call = original
    if outer is None:
      rules.pop(gpu_core.CompilerParams, None)
    else:
      rules[gpu_core.CompilerParams] = outer


def _shim_kwargs(kwargs: dict) -> dict:
  """``pl.pallas_call``'s keyword arguments as the shim takes them; refuses (naming it)
  one the shim has no equivalent for."""
  from mosaic_async_store.errors import refuse
  out = {}
  for name, value in kwargs.items():
    if name in _SHIM_ARGS:
      out[name] = value
    elif name in _IGNORED_ARGS or (name == "input_output_aliases" and not value) or (
        name == "interpret" and not value):
      continue   # no effect on the kernel the shim builds
    else:
      raise refuse(f"pl.pallas_call({name}=...)", value, "on jax "
                   f"{'.'.join(map(str, jax_version()))}'s Mosaic GPU path: grid, in_specs, "
                   "out_specs, scratch_shapes and compiler_params", "express it with "
                   "plgpu.kernel, or drop it")
  return out


@contextlib.contextmanager
def frames_not_user(*folders: str):
  """While active, jax counts frames in ``folders`` as its own, not the user's: the
  source locations it gives a lowered kernel's ops (``source_info_util.user_frame``)
  then name the user's line that called this package's helpers (``pallas_load``,
  ``async_store_smem``), not the helper's line.  jax 0.10 to 0.12 keep the list in
  the private ``source_info_util._exclude_paths`` (``register_exclusion`` adds to it;
  nothing removes from it, so this does, and clears the caches of both functions)."""
  from jax._src import source_info_util as info   # private: jax 0.10 .. 0.12
  added = [f for f in folders if f not in info._exclude_paths]
  for folder in added:
    info.register_exclusion(folder)
  try:
    yield
  finally:
    for folder in added:
      info._exclude_paths.remove(folder)
    info._exclude_path_regex.cache_clear()
    info.is_user_filename.cache_clear()


@contextlib.contextmanager
def equation_locations(wrap):
  """While active, the location jax gives each equation it lowers is made by
  ``wrap(original)(ctx, primitive, name_stack, traceback)``.  jax 0.10 to 0.12 make it
  in the private ``mlir.source_info_to_location``, which Pallas' Mosaic GPU lowering
  calls through the module, per equation, inside the location of the equation whose
  rule lowers the body (``with source_info_util.user_context(...), loc:``)."""
  from jax._src.interpreters import mlir as jax_mlir   # private: jax 0.10 .. 0.12
  original = jax_mlir.source_info_to_location
  jax_mlir.source_info_to_location = wrap(original)
  try:
    yield
  finally:
    jax_mlir.source_info_to_location = original


class _TargetDevice:
  """The CPU device, answering the GPU queries of ``tools.device_target.ANSWERED`` for
  a ``DeviceTarget``; any other attribute is the CPU device's."""

  platform = "gpu"

  def __init__(self, real, target):
    self._real, self.target = real, target
    self.core_count = target.sm_count
    self.compute_capability = target.compute_capability
    self.device_kind = target.device_kind
    self.shared_memory_per_block_optin = target.smem_per_block

  def __getattr__(self, name):
    return getattr(self._real, name)

  def __repr__(self):
    return f"TargetDevice({self.device_kind}, {self.target.arch}, deviceless)"


def _cuda_versions_for(target):
  import types
  version = lambda: target.cuda_version
  return types.SimpleNamespace(cuda_runtime_get_version=version,
                               cuda_driver_get_version=version)


@contextlib.contextmanager
def answer_device_queries(target):
  """While active, the device queries a kernel makes while it is loaded, traced and
  lowered are answered for ``target`` (a ``tools.device_target.DeviceTarget``), not for
  the CPU this runs on: ``jax.extend.backend.get_default_device()`` and ``jax.devices()``
  / ``jax.local_devices()`` (without arguments) return one device whose ``core_count``,
  ``compute_capability`` (the arch Mosaic infers and builds for), ``device_kind``,
  ``platform`` and ``shared_memory_per_block_optin`` are the target's, and
  ``jax._src.lib.cuda_versions`` (None without a CUDA plugin) answers the target's CUDA
  version, also in modules that imported it as None (upstream's attention_mgpu).

  jax 0.10 to 0.12 infer Mosaic's arch from ``jax.extend.backend.get_default_device()``
  (``_infer_arch``, in core.py up to 0.10 and utils.py after) and read the SMEM limit
  from ``jax.local_devices()[0]``; ``cuda_versions`` is private (``jax._src.lib``).
  jax's caches are cleared on entry and exit: a trace cached under another target (or
  none) would keep that target's answers."""
  import sys

  import jax
  import jax._src.lib as jax_lib   # private: cuda_versions, jax 0.10 .. 0.12
  from jax.extend import backend
  device = _TargetDevice(backend.get_default_device(), target)
  versions = _cuda_versions_for(target)
  originals = {(backend, "get_default_device"): backend.get_default_device,
               (jax, "devices"): jax.devices, (jax, "local_devices"): jax.local_devices}

  def listing(original):
    return lambda *args, **kwargs: original(*args, **kwargs) if args or kwargs else [device]

  patched_versions = getattr(jax_lib, "cuda_versions", None) is None
  holders = [m for m in list(sys.modules.values())
             if patched_versions and getattr(m, "__dict__", {}).get("cuda_versions", 0) is None
             and (getattr(m, "__name__", "") or "").startswith(("jax", "jaxlib"))]
  jax.clear_caches()
  backend.get_default_device = lambda: device
  jax.devices, jax.local_devices = listing(jax.devices), listing(jax.local_devices)
  if patched_versions:
    for module in holders + [jax_lib]:
      module.cuda_versions = versions
  try:
    yield device
  finally:
    for (owner, name), value in originals.items():
      setattr(owner, name, value)
    if patched_versions:   # also modules imported while active, which bound the stand-in
      for module in list(sys.modules.values()):
        if getattr(module, "__dict__", {}).get("cuda_versions", None) is versions:
          module.cuda_versions = None
    jax.clear_caches()


def _pallas_kernel_primitives() -> list:
  """The primitives a Pallas MGPU kernel binds: ``pallas_call_p`` (``pl.pallas_call``;
  ``plgpu.kernel`` up to jax 0.9) and ``mpmd_map_p`` (``plgpu.kernel``, jax 0.10 to 0.12),
  where this jax has it (both private)."""
  from jax._src.pallas import pallas_call as pallas_call_module   # private: jax 0.10 .. 0.12
  prims = [pallas_call_module.pallas_call_p]
  try:
    from jax._src.pallas import mpmd   # private: jax 0.10 .. 0.12
  except ImportError:
    return prims
  return prims + [mpmd.mpmd_map_p]


def is_mosaic_gpu_kernel(params: dict) -> bool:
  """Whether a Pallas kernel primitive's parameters (``pallas_call_p``'s or
  ``mpmd_map_p``'s) make a Mosaic GPU kernel not in interpret mode: Mosaic GPU compiler
  params, or a ``plgpu`` mesh (``plgpu.kernel`` without compiler params)."""
  from jax._src.pallas.mosaic_gpu import core as gpu_core   # private: jax 0.10 .. 0.12
  if params.get("interpret"):
    return False
  meshes = list(params.get("meshes") or ()) + [params.get("mesh")]
  return (isinstance(params.get("compiler_params"), gpu_core.CompilerParams)
          or any(isinstance(m, gpu_core.Mesh) for m in meshes))


@contextlib.contextmanager
def kernel_lowering_on_cpu(make_rule):
  """While active, a Pallas kernel primitive lowered for the CPU is lowered by
  ``make_rule(primitive, rule)(ctx, *operands, **params)``, where ``rule`` is the
  primitive's own lowering (which refuses Mosaic GPU kernels on a CPU).  jax 0.10 to 0.12
  keep per-platform rules in the private ``_platform_specific_lowerings``, ahead of the
  common ones (``_lowerings``); each entry a dataclass whose ``rule`` is the function.
  Entries are restored on exit."""
  from jax._src.interpreters import mlir as jax_mlir   # private: jax 0.10 .. 0.12
  table = jax_mlir._platform_specific_lowerings["cpu"]
  saved = {}
  for prim in _pallas_kernel_primitives():
    saved[prim] = table.get(prim)
    entry = saved[prim] or jax_mlir._lowerings[prim]
    table[prim] = dataclasses.replace(entry, rule=make_rule(prim, entry.rule))
  try:
    yield
  finally:
    for prim, entry in saved.items():
      if entry is None:
        table.pop(prim, None)
      else:
        table[prim] = entry


def lowering_call_site(ctx) -> str | None:
  """The user's line that called the primitive a lowering rule lowers, as ``file:line``,
  or None: ``ctx.traceback`` where jax fills it, else the equation's traceback, which jax
  0.10 to 0.12 make current while its rule runs (``source_info_util.user_context``)."""
  from jax._src import source_info_util   # private: jax 0.10 .. 0.12
  tb = getattr(ctx, "traceback", None) or source_info_util.current().traceback
  frame = source_info_util.user_frame(tb)
  return None if frame is None else f"{frame.file_name}:{frame.start_line}"


def lower_as(ctx, fun, operands) -> list:
  """Lowers the primitive of a lowering rule's ``ctx`` as ``fun(*operands)`` (jax
  functions of the operands, multiple results: the private ``mlir.lower_fun``, jax 0.10
  to 0.12)."""
  from jax._src.interpreters import mlir as jax_mlir   # private: jax 0.10 .. 0.12
  return jax_mlir.lower_fun(fun, multiple_results=True)(ctx, *operands)
