"""Every Pallas MGPU kernel of jax's ``experimental/pallas/ops/gpu/`` compiles deviceless
for the GPU it is written for (test/harness/upstream_ops.py: WGMMA kernels for sm_90a,
tcgen05 kernels for sm_100a), with the device queries answered for that GPU; the
refusals around them say whose the cause is.  ``check`` runs the Blackwell matmuls and
the ragged dots (NumPy's products; the ragged dots' missing ``wgmma_wait`` found).

Cost: one compile per kernel and arch (about 1-2 s each, small problems), shared with
the CLI test through the session's tool cache; each ragged dot's check about 10-40 s.
"""

from __future__ import annotations

import numpy as np
import pytest

import upstream_ops
from mosaic_async_store import compat
from mosaic_async_store.check.memory import CI_SCHEDULES
from mosaic_async_store.errors import AsyncStoreError
from mosaic_async_store.tools import cli, user_kernel
from mosaic_async_store.tools.device_target import DEFAULTS, device_target

_CASES = [pytest.param(case, arch, id=f"{case.name}-{arch}")
          for case in upstream_ops.KERNELS for arch in case.archs]
# What each arch's kernels must contain: its matrix instruction and TMA.
_EXPECTED = {"sm_90a": ("WGMMA", "TMA load"), "sm_100a": ("tcgen05", "TMA load")}


def _made(case):
  try:
    return case.make()
  except ImportError as e:
    pytest.skip(f"jax {'.'.join(map(str, compat.jax_version()))} has no {case.module}: {e}")


def test_every_module_of_the_folder_is_compiled_or_listed_with_a_reason():
  compiled = {case.module for case in upstream_ops.KERNELS + upstream_ops.MESH_KERNELS}
  unlisted = [m for m in upstream_ops.ops_modules()
              if m not in compiled and m not in upstream_ops.NOT_APPLICABLE]
  assert not unlisted, f"add them to upstream_ops.KERNELS or NOT_APPLICABLE: {unlisted}"


@pytest.mark.parametrize("case, arch", _CASES)
def test_upstream_kernel_compiles_for_its_arch(case, arch):
  fn, arrays = _made(case)
  compiled = user_kernel.compile_kernel(fn, *arrays, arch=arch)
  counts = compiled.stats.asynchronous
  for kind in _EXPECTED[arch]:
    assert counts[kind] > 0, (kind, counts)
  assert f".target {arch}" in compiled.ptx


@pytest.mark.parametrize("case", upstream_ops.MESH_KERNELS, ids=lambda c: c.name)
def test_multi_device_kernel_compiles_on_a_one_device_mesh(case):
  """To a relocatable cubin: the PTX calls NVSHMEM's device functions, which upstream
  links from NVSHMEM's bitcode; the SASS calls them at addresses a link fills in."""
  fn, arrays = _made(case)
  compiled = user_kernel.compile_kernel(fn, *arrays, arch="sm_90a")
  assert compiled.relocatable and ".extern .func" in compiled.ptx and "nvshmem" in compiled.ptx
  assert "CALL.ABS" in compiled.sass
  if case.name != "collective_matmul":
    assert "multimem." in compiled.ptx
  else:
    assert compiled.stats.asynchronous["WGMMA"] > 0


def test_device_queries_are_answered_for_the_target_and_restored():
  import jax
  from jax.extend import backend
  from jax.experimental.mosaic.gpu import core, utils
  infer_arch = getattr(utils, "_infer_arch", None) or core._infer_arch   # 0.10: in core
  before = backend.get_default_device()
  target = device_target("sm_100a", sm_count=7, cuda_version=12080)
  with compat.answer_device_queries(target) as device:
    assert backend.get_default_device() is device and jax.local_devices() == [device]
    assert (device.core_count, device.compute_capability) == (7, "10.0")
    assert infer_arch() == (10, 0)   # what Mosaic builds the kernel for
    from jax._src import lib
    assert lib.cuda_versions.cuda_runtime_get_version() == 12080
    assert jax.devices("cpu")[0].platform == "cpu"   # an explicit backend: the real one
  assert backend.get_default_device() is before
  assert not hasattr(before, "core_count")
  assert DEFAULTS["sm_90a"].sm_count == 132 and DEFAULTS["sm_100a"].sm_count == 148


def test_a_kernel_sized_by_the_sm_count_gets_the_targets():
  """hopper_mixed_type_matmul sizes its persistent grid by ``core_count``: the CPU has
  none (an empty AttributeError before); the grid is the target's SM count."""
  case = next(c for c in upstream_ops.KERNELS if c.name == "hopper_mixed_type_matmul")
  fn, arrays = _made(case)
  with compat.answer_device_queries(device_target("sm_90a", sm_count=3)):
    specs, _ = user_kernel.kernel_specs(fn, arrays)
    mlir = str(user_kernel.lower_kernel(fn, specs))
  from mosaic_async_store.tools.check_kernel import launch_shape
  assert launch_shape(mlir)["grid"][0] == 3


def test_causal_attention_gets_the_targets_cuda_version():
  """Upstream refuses causal attention for CUDA 12.8.0 to 12.9.0 (a ptxas
  miscompilation); without a CUDA plugin ``cuda_versions`` is None (an empty
  AssertionError before).  The default, 13.0, compiles (test above); 12.8 is refused
  with upstream's own words."""
  case = next(c for c in upstream_ops.KERNELS if c.name == "attention_causal")
  fn, arrays = _made(case)
  with pytest.raises(AsyncStoreError, match="Causal masking not supported with cuda"):
    user_kernel.compile_kernel(fn, *arrays, arch="sm_90a", cuda_version=12080)


@pytest.mark.parametrize("said, arch, fix", [
    ("mlir-opt: <stdin>:9:7: error: intrinsic call operand #0 has type ptr addrspace(3)",
     "sm_100a", "report it"),
    ("mlir-opt: x.py:1:2: error: 'nvvm.tcgen05.fence' op is not supported on sm_90a",
     "sm_90a", "arch='sm_100a'"),
    ("ptxas: error: Instruction 'wgmma.fence' not supported on .target 'sm_100a'",
     "sm_100a", "arch='sm_90a'"),
    ("ptxas: error: Entry function uses too much shared data", "sm_90a",
     "change the construct"),
    ("mlir-opt: x.py:3:4: error: 'nvvm.tcgen05.fence' op is not supported on sm_103a",
     "sm_103a", "report it"),
])
def test_a_refusal_says_whose_the_cause_is(said, arch, fix):
  assert fix in user_kernel.compile_fix(said, arch)


_BLACKWELL_FILE = """
import upstream_ops

def make():
  case = next(c for c in upstream_ops.KERNELS if c.name == "blackwell_matmul")
  return case.make()
"""


def _blackwell_target(tmp_path):
  _made(next(c for c in upstream_ops.KERNELS if c.name == "blackwell_matmul"))
  path = tmp_path / "blackwell.py"
  path.write_text(_BLACKWELL_FILE)
  return f"{path}:make"


def test_cli_compiles_the_blackwell_matmul_with_its_counts(tmp_path, capsys):
  target = _blackwell_target(tmp_path)
  assert cli.main(["compile", target, "--arch", "sm_100a", "--emit", "stats"]) == 0
  rows = dict(line.rsplit(None, 1) for line in capsys.readouterr().out.splitlines()[1:])
  assert int(rows["tcgen05"]) > 0 and int(rows["TMA load"]) > 0 and int(rows["TMA store"]) > 0


@pytest.mark.long
def test_check_runs_the_blackwell_matmul_from_the_cli(tmp_path, capsys):
  """``check FILE.py:FUNCTION`` takes the kernel's own arch (tcgen05: sm_100a) and runs
  it: exit 0, its two warnings printed (neither fails without --strict; with it, 1)."""
  target = _blackwell_target(tmp_path)
  assert cli.main(["check", target, "--schedules", "1"]) == 0
  out = capsys.readouterr().out
  assert out.splitlines()[0].endswith("warning(s):"), out
  assert "[warning: tcgen05-fence-operand]" in out and "[warning: exit-async-read]" in out
  assert cli.main(["check", target, "--schedules", "1", "--strict"]) == 1


@pytest.mark.long
def test_check_runs_the_blackwell_ragged_dot_with_the_right_product():
  """jax's Blackwell ragged dot (a CTA pair, tcgen05 .cta_group::2, its group bounds
  clamped with min.relu.s32) over two uneven groups: no error and NumPy's group-wise
  product exactly (small integers in f16); its warnings are those docs/checker.md lists
  for the Blackwell matmul it shares its pipeline with.  One schedule: about 13 s each
  (the rules themselves are held in every CI schedule by the matmul above)."""
  import numpy as np
  case = next(c for c in upstream_ops.KERNELS if c.name == "blackwell_ragged_dot")
  fn, (a, b, _) = _made(case)
  rng = np.random.default_rng(0)
  a, b = (rng.integers(-3, 4, np.shape(x)).astype(np.float16) for x in (a, b))
  sizes = np.array([192, a.shape[0] - 192], np.int32)
  from mosaic_async_store.tools.check_kernel import check
  report = check(fn, a, b, sizes, schedules=1)
  assert report.ok, str(report)
  assert {f.rule for f in report.warnings} <= {"tcgen05-fence-operand", "exit-relaxed"}, \
      str(report)
  expected = upstream_ops.ragged_reference("ragged_dot", a, b, sizes)
  np.testing.assert_array_equal(np.asarray(report.outputs[-1], np.float32), expected)


@pytest.mark.long
@pytest.mark.parametrize("name", ["blackwell_matmul", "blackwell_matmul_collective"])
def test_check_runs_the_blackwell_matmul_with_the_right_product(name):
  """jax's Blackwell matmul, plain and collective (a CTA pair: tcgen05 with
  .cta_group::2, TMA loads signalling the leader's barrier), under the CI's schedules:
  no error, and D = A @ B exactly (small integers in f16: every product and sum is
  exact in f32 and f16); its warnings are the ones docs/checker.md lists for it.  The
  collective form of jax 0.11 and 0.12.0 has a bug 0.12.1 fixed, which the checker
  reports."""
  import numpy as np
  case = next(c for c in upstream_ops.KERNELS if c.name == name)
  fn, zeros = _made(case)
  rng = np.random.default_rng(0)
  a, b = (rng.integers(-3, 4, np.shape(x)).astype(np.float16) for x in zeros)
  from mosaic_async_store.tools.check_kernel import check
  report = check(fn, a, b, schedules=3)
  if name == "blackwell_matmul_collective" and (0, 11) <= compat.jax_version() < (0, 12, 1):
    # Upstream's bug, of its dynamic scheduling loop (jax 0.11), fixed in 0.12.1 ("Otherwise each CTA cancels a different
    # cluster, and the pair deadlocks on its shared barriers": dynamic_scheduling_loop
    # gained cluster_axes): both CTAs multicast a try_cancel, so each gets two responses
    # against one expect_tx.  Found in every schedule.
    assert {"early-read", "hang"} & {f.rule for f in report.errors}, str(report)
    assert all({"early-read", "hang"} & {f.rule for f in report.errors if f.schedule == s}
               for s in range(3)), str(report)
    return
  assert report.ok, str(report)
  allowed = {"tcgen05-fence-operand", "exit-async-read", "exit-relaxed"}
  if name == "blackwell_matmul_collective":
    # its store_done_barrier (a ClusterBarrier) arrives on the peer's at .release.cta
    assert "peer-arrive-cta" in {f.rule for f in report.warnings}, str(report)
    allowed.add("peer-arrive-cta")
  assert {f.rule for f in report.warnings} <= allowed, str(report)
  np.testing.assert_array_equal(np.asarray(report.outputs[0], np.float32),
                                a.astype(np.float32) @ b.astype(np.float32))


# Uneven groups: the first ends inside a 64-row block (the kernels' ragged edges).
_GROUPS = (40, 216)


def _ragged_check(name, k=None, wgmma_wait=False):
  from mosaic_async_store.tools.check_kernel import check
  fn, (lhs, rhs, sizes) = _ragged_made(name, k, wgmma_wait)
  report = check(fn, lhs, rhs, sizes, schedules=len(CI_SCHEDULES))
  return report, upstream_ops.ragged_reference(name, lhs, rhs, sizes)


def _ragged_made(name, k, wgmma_wait):
  try:
    return upstream_ops.ragged_problem(name, _GROUPS, k=k, wgmma_wait=wgmma_wait)
  except ImportError as e:
    pytest.skip(f"jax {'.'.join(map(str, compat.jax_version()))} has no {name}: {e}")


@pytest.mark.parametrize("name", ["ragged_dot", "ragged_dot_transpose_rhs"])
def test_check_runs_the_ragged_dot_with_the_right_product(name):
  """Upstream's ``ragged_dot`` launches ``kernel(group_sizes, lhs, rhs)``: the kernel's
  operands in another order than ``fn``'s, an 8-byte array among them.  Before, ``check``
  built the right-hand side's TMA descriptor over ``group_sizes`` and refused it ("a
  tensor inside the array's 8 bytes").  K = 128 is two k steps, one per pipeline slot:
  no slot is refilled (the race below needs more).  No error under the CI's schedules,
  and the product is NumPy's, group by group (small integers: exact)."""
  report, want = _ragged_check(name)
  assert report.ok, str(report)
  np.testing.assert_array_equal(report.outputs[0], want.astype(np.float16))


@pytest.mark.long
@pytest.mark.parametrize("name, k", [("transposed_ragged_dot", None), ("ragged_dot", 256)])
def test_check_finds_the_ragged_dots_refilling_a_slot_a_wgmma_reads(name, k):
  """Upstream's ragged dots pipeline k with ``delay_release=1`` over two slots and never
  ``wgmma_wait``: step i's TMA load refills the slot step i-1's WGMMA group may still
  read (no ``wgmma.wait_group`` in the loop; hopper_matmul_mgpu waits with
  ``plgpu.wgmma_wait(delay_release)``).  A ``race`` in every CI schedule wherever a group
  spans more k steps than slots (the transposed dot's second group: 216 of k = 256; the
  ragged dot with k = 256); with ``wgmma_wait(1)`` after each ``wgmma`` (the neighbour)
  no error and NumPy's product.  The transposed dot computes four of its seven operands
  (group starts, ends, ...) from ``group_sizes``: they come from ``fn`` run on the CPU."""
  report, _ = _ragged_check(name, k)
  by_schedule = [{f.rule for f in report.errors if f.schedule == s}
                 for s in CI_SCHEDULES]
  assert all("race" in rules for rules in by_schedule), str(report)
  assert any("wgmma.mma_async" in f.message for f in report.errors), str(report)
  fixed, want = _ragged_check(name, k, wgmma_wait=True)
  assert fixed.ok, str(fixed)
  np.testing.assert_array_equal(fixed.outputs[0], want.astype(np.float16))


_MIXED_FILE = """
import upstream_ops

def make():
  return next(c for c in upstream_ops.KERNELS if c.name == "hopper_mixed_type_matmul").make()
"""


def test_cli_answers_the_sm_count_it_is_given(tmp_path, capsys):
  _made(next(c for c in upstream_ops.KERNELS if c.name == "hopper_mixed_type_matmul"))
  path = tmp_path / "mixed.py"
  path.write_text(_MIXED_FILE)
  from mosaic_async_store.tools.check_kernel import launch_shape
  assert cli.main(["compile", f"{path}:make", "--emit", "mlir", "--sm-count", "5",
                   "--cuda-version", "12.8"]) == 0
  assert launch_shape(capsys.readouterr().out)["grid"][0] == 5


@pytest.mark.parametrize("argv, said", [
    (["--sm-count", "0"], "--sm-count 0: must be >= 1"),
    (["--cuda-version", "twelve"], "--cuda-version twelve: expected MAJOR.MINOR"),
])
def test_cli_refuses_a_bad_target_property_in_one_line(tmp_path, capsys, argv, said):
  path = tmp_path / "mixed.py"
  path.write_text(_MIXED_FILE)
  assert cli.main(["compile", f"{path}:make", *argv]) == 2
  err = capsys.readouterr().err.strip()
  assert len(err.splitlines()) == 1 and said in err, err


def test_cli_refuses_target_properties_for_the_store_kernel(capsys):
  assert cli.main(["compile", "--sm-count", "4"]) == 2
  assert "the project's store kernel makes none" in capsys.readouterr().err
