"""The bulk-copy grammar (``check.tma_forms``): every example (``check.tma_examples``)
decodes, every refused form is refused by name (NotImplementedError, not NotInIsa), every
non-ISA form is NotInIsa, the forms Mosaic GPU emits decode with the right fields, and an
``opcodes.Instr`` decodes as its text does."""

import re

import pytest

from mosaic_async_store.check import opcodes
from mosaic_async_store.check.families.tma.examples import EXAMPLES, NOT_IN_ISA, REFUSED
from mosaic_async_store.check.families.tma.forms import GROUP, MBAR, NotInIsa, decode_bulk, parse_operand


@pytest.mark.parametrize("stmt", EXAMPLES)
def test_every_example_decodes(stmt):
  form = decode_bulk(stmt)
  assert form.opcode == stmt.split()[0]
  assert len(form.roles) == len(form.ops)


@pytest.mark.parametrize("stmt", REFUSED)
def test_every_refused_form_is_refused_by_name(stmt):
  with pytest.raises(NotImplementedError, match=re.escape(stmt.split()[0])) as e:
    decode_bulk(stmt)
  assert not isinstance(e.value, NotInIsa)


@pytest.mark.parametrize("stmt", NOT_IN_ISA)
def test_every_non_isa_form_is_an_error(stmt):
  with pytest.raises(NotInIsa, match=re.escape(stmt.split()[0])):
    decode_bulk(stmt)


# The bulk-copy statements of test/harness/tma_kernels.py's kernels as Mosaic GPU emits
# them (jax 0.12, sm_90a), whitespace and guards as in the PTX.
MOSAIC = (
    "@%p1 cp.async.bulk.tensor.2d.shared::cta.global.mbarrier::complete_tx::bytes "
    "[%r10], [%rd18, {%r241,%r9}], [%r7];",
    "@%p3 cp.async.bulk.tensor.1d.shared::cluster.global.mbarrier::complete_tx::bytes"
    ".multicast::cluster [%r5], [%rd1, {%r6}], [%r2], %rs1;",
    "@%p14 cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%rd1, {%r31, %r32} ], [%r30];",
    "@%p1 cp.async.bulk.global.shared::cta.bulk_group [%rd13], [%rd14], %r60;",
    "@%p2 prefetch.tensormap [%rd15];",
    "cp.async.bulk.commit_group;",
    "cp.async.bulk.wait_group \t0;",
    "cp.async.bulk.wait_group.read \t1;",
)


def test_mosaic_tensor_load():
  f = decode_bulk(MOSAIC[0])
  assert (f.kind, f.dims, f.dst, f.src, f.completion, f.load_mode, f.multicast) == \
      ("tensor_load", 2, "shared::cta", "global", MBAR, "tile", False)
  assert f.roles == ("dstMem", "tensorMap", "tensorCoords", "mbar")
  assert f.operand("dstMem") == ("addr", ("reg", "%r10"), 0)
  assert f.operand("tensorMap") == ("reg", "%rd18")
  assert f.operand("tensorCoords") == (("reg", "%r241"), ("reg", "%r9"))   # c0 first
  assert f.operand("mbar") == ("addr", ("reg", "%r7"), 0)
  with pytest.raises(KeyError, match="ctaMask"):
    f.operand("ctaMask")


def test_mosaic_multicast_load():
  f = decode_bulk(MOSAIC[1])
  assert (f.kind, f.dims, f.dst, f.multicast) == ("tensor_load", 1, "shared::cluster", True)
  assert f.roles == ("dstMem", "tensorMap", "tensorCoords", "mbar", "ctaMask")
  assert f.operand("ctaMask") == ("reg", "%rs1")


def test_mosaic_tensor_store_and_bulk_store():
  f = decode_bulk(MOSAIC[2])
  assert (f.kind, f.dst, f.src, f.completion) == ("tensor_store", "global", "shared::cta",
                                                  GROUP)
  assert f.roles == ("tensorMap", "tensorCoords", "srcMem")
  assert f.operand("tensorCoords") == (("reg", "%r31"), ("reg", "%r32"))
  g = decode_bulk(MOSAIC[3])
  assert (g.kind, g.roles) == ("copy_s2g", ("dstMem", "srcMem", "size"))
  assert g.operand("size") == ("reg", "%r60")


def test_mosaic_groups_and_prefetch():
  assert decode_bulk(MOSAIC[4]).kind == "prefetch_tensormap"
  assert decode_bulk(MOSAIC[5]).kind == "commit" and decode_bulk(MOSAIC[5]).ops == ()
  wait, read = decode_bulk(MOSAIC[6]), decode_bulk(MOSAIC[7])
  assert (wait.kind, wait.read, wait.operand("N")) == ("wait", False, ("imm", 0))
  assert (read.kind, read.read, read.operand("N")) == ("wait", True, ("imm", 1))


def test_mosaic_reduction_store():
  # launch_context.py's form: .redOp before .tile and .bulk_group (the ISA's order)
  f = decode_bulk("@%p1 cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group "
                  "[%rd3,{%r4,%r5}], [%r2];")
  assert (f.kind, f.red_op, f.red_type, f.dims) == ("tensor_reduce", "add", None, 2)


def test_cache_hint_and_reduce_fields():
  f = decode_bulk(EXAMPLES[3])
  assert f.cache_hint and f.multicast and f.dims == 5
  assert f.roles[-2:] == ("ctaMask", "cachePolicy")
  r = decode_bulk("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.noftz.bf16 "
                  "[%rd1], [%r1], 64")
  assert (r.kind, r.red_op, r.red_type, r.noftz) == ("reduce_s2g", "add", "bf16", True)


def test_an_instr_decodes_as_its_text():
  stmt = MOSAIC[1].split(" ", 1)[1].rstrip(";")
  opcode, rest = stmt.split(" ", 1)
  from mosaic_async_store.check.ops import split_operands
  ops = [parse_operand(t) for t in split_operands(rest)]
  ins = opcodes.decode(opcode, ops, lambda op: None)
  assert decode_bulk(ins) == decode_bulk(stmt)

