"""Every store the emitter writes is spelled by its plan instruction.

The plan decides each instruction's full PTX opcode, state space included
(``Instruction.opcode``: ``.shared::cluster`` for a peer, ``.shared::cta`` for
plain st/red into the executing CTA); the emitters only write it.  For a sample
of real plans this builds the kernel's IR and checks that the store inline-asm
texts, in order, start with exactly the plan's opcodes.
"""

import os
import re

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import pytest  # noqa: E402
from jaxlib.mlir import ir  # noqa: E402
from jaxlib.mlir.dialects import arith, gpu  # noqa: E402

from mosaic_async_store import compat
from mosaic_async_store.demo.config import view_geometry  # noqa: E402
from mosaic_async_store.demo.config import StoreConfig, resolve_layout  # noqa: E402
from store_kernels import kernel_parts  # noqa: E402
from mosaic_async_store.lowering.store import async_store  # noqa: E402
from mosaic_async_store.plan.planner import plan_store  # noqa: E402

_ASM = re.compile(r'llvm\.inline_asm (?:has_side_effects )?(?:[a-z_]+ )*"((?:[^"\\]|\\.)*)"')
_STORE_PREFIXES = ("st.", "red.")


def _plan(cfg: StoreConfig, plain: bool):
  view = view_geometry(cfg)
  return plan_store(resolve_layout(cfg.layout, cfg.shape, cfg.dtype), cfg.shape, cfg.dtype,
                    swizzle=cfg.swizzle, optimized=cfg.optimized, atomic=cfg.atomic,
                    ref_shape=view.ref_shape, ref_strides=view.strides,
                    peer=cfg.target == "peer", cluster_size=cfg.cluster,
                    plain_stores=plain)


def _store(cfg: StoreConfig, plain: bool):
  """The test kernel's store, as ``kernel_parts`` makes it, with ``strategy``."""
  def store(value, view, barrier):
    kwargs = {}
    if cfg.target == "peer":
      index = ir.IndexType.get()
      peer = arith.remui(arith.addi(gpu.cluster_block_id(gpu.Dimension.x),
                                    arith.constant(index, 1)),
                         arith.constant(index, cfg.cluster))
      kwargs = dict(cluster_dim=gpu.Dimension.x, cluster_idx=peer)
    async_store(value, view, barrier, swizzle=cfg.swizzle, optimized=cfg.optimized,
                atomic=cfg.atomic, strategy="plain" if plain else "st.async", **kwargs)
  return store


def _store_asm(cfg: StoreConfig, plain: bool, prefixes=_STORE_PREFIXES) -> list[str]:
  with compat.make_ir_context(), ir.Location.unknown(), compat.enable_x64():
    parts = kernel_parts(cfg, bare=True, store=_store(cfg, plain))
    module, *_ = compat.kernel_to_module(
        parts.body, parts.grid, parts.block, parts.in_shape, parts.out_shape,
        parts.scratch, cluster=parts.cluster)
    text = module.operation.get_asm(enable_debug_info=False)
  return [a for a in _ASM.findall(text) if a.startswith(prefixes)]


CASES = [
    (dict(), False),                                             # bf16 st.async v4
    (dict(dtype="float32"), False),
    (dict(dtype="int8", swizzle=64), False),                     # gathered sub-word pieces
    (dict(dtype="float16", swizzle=None), False),
    (dict(dtype="float32", layout="WGMMA_8BIT"), False),         # st.async v4.b32
    (dict(dtype="int8", layout="STRIDED"), False),
    (dict(dtype="bfloat16"), True),                              # plain, peer: shared::cluster
    (dict(dtype="int16", swizzle=32), True),
    (dict(dtype="int8", swizzle=None), True),                    # st.shared::cluster.u16
    (dict(dtype="float16", target="local", cluster=1), False),   # forced plain: shared::cta
    (dict(dtype="int8", target="local", cluster=1, swizzle=None), False),
    (dict(dtype="float32", target="local"), True),               # plain into the own CTA
    (dict(dtype="int32", atomic="add"), False),                  # red.async
    (dict(dtype="uint64", atomic="add"), False),
    (dict(dtype="int32", atomic="max", target="local"), False),  # red.shared::cta
    (dict(dtype="float32", atomic="add", target="local", cluster=1), False),
    (dict(dtype="bfloat16", atomic="add"), False),               # red.shared::cluster x2 pairs
    (dict(dtype="float64", atomic="add"), False),
]


@pytest.mark.parametrize("cfg, plain", CASES, ids=[
    "-".join(f"{k}={v}" for k, v in c.items()) + ("-plain" if p else "") or "default"
    for c, p in CASES])
def test_store_asm_is_the_plans_opcodes(cfg, plain):
  cfg = StoreConfig(**cfg)
  plan = _plan(cfg, plain)
  want = [ins.opcode for ins in plan.instructions]
  got = _store_asm(cfg, plain)
  assert len(got) == len(want), (len(got), len(want))
  for i, (asm, opcode) in enumerate(zip(got, want)):
    assert asm.split(" ", 1)[0] == opcode, (i, asm, opcode)
  # The state space follows the target: the own CTA's window for plain forms.
  space = "shared::cluster" if cfg.target == "peer" else "shared::cta"
  for ins in plan.instructions:
    assert ins.space == ("shared::cluster" if ins.is_async else space), ins.opcode
    assert f".{ins.space}." in ins.opcode


def test_opcodes_spelled_in_full():
  want = {
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32",
      "st.shared::cluster.u16",
      "st.shared::cta.b32",
      "red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes.add.u32",
      "red.relaxed.cluster.shared::cta.add.f32",
  }
  got = set()
  for cfg, plain in [(dict(dtype="float32", layout="WGMMA_8BIT"), False),
                     (dict(dtype="int8", swizzle=None), True),
                     (dict(dtype="float16", target="local", cluster=1), False),
                     (dict(dtype="uint32", atomic="add"), False),
                     (dict(dtype="float32", atomic="add", target="local", cluster=1), False)]:
    got |= {i.opcode for i in _plan(StoreConfig(**cfg), plain).instructions}
  assert want <= got, want - got


@pytest.mark.parametrize("cfg", [dict(dtype="int8"), dict(dtype="int4", shape=(64, 256)),
                                 dict(dtype="int8", swizzle=None)], ids=str)
def test_one_shuffle_per_lane_exchange_step(cfg):
  """The plan states which exchanges share a ``shfl.sync.bfly`` (``LaneExchange``);
  the emitter writes one per step, with the step's lane mask, in order."""
  cfg = StoreConfig(**cfg)
  plan = _plan(cfg, False)
  assert not plan.register_steps and plan.exchanges
  assert all(len(s.exchanges) * s.exchanges[0].a.size <= 4 for s in plan.exchanges)
  got = _store_asm(cfg, False, prefixes=("shfl.sync.bfly",))
  assert [a.split(", ")[2] for a in got] == [str(s.lane_mask) for s in plan.exchanges]
