"""Proof without a GPU for the Pallas runtime kernels (test/harness/pallas_run.py).

Every case of ``pallas_run.PALLAS_CASES`` (Lane and Warpgroup semantics, this
project's primitive and upstream's through ``install()``, plain stores and
reductions) is lowered by Pallas on the CPU (``pallas_capture``), compiled to
PTX by the deviceless toolchain and executed over every thread of a 2-CTA
cluster by ``mosaic_async_store.check``, under each schedule of ``check.memory.SCHEDULES``,
with the inputs of ``pallas_run.make_inputs``.  The bytes left in ``out`` must
equal ``pallas_run.expected`` exactly; every memory-ordering rule is checked.
The kernel's launch is exactly that cluster (``grid=(1,)``, ``cluster=(2,)``).

Kernel parameters.  Pallas passes its kernel the GMEM refs it reads through
registers, ``x`` and ``init`` (arguments), as memref descriptors: allocated and
aligned pointer, offset, sizes, strides, i.e. 3 + 2 * rank 8-byte ``.param``s
in the PTX (9 for these rank-3 buffers); ``out`` is written by a TMA store, so its
host code builds a TMA descriptor, a 128-byte parameter (4-bit data: a memref,
copied out through registers).  The outlined kernel takes them in order of first
use in the ``gpu.launch`` body; ``check_kernel.kernel_parameters`` reads that order
and rebuilds the descriptors from the host code, as ``check`` does.  Plain stores
never read ``init``, which then is no parameter at all.  A wrong order faults on
bounds or mismatches (``test_wrong_parameter_order_is_caught``).

SMEM: the ``dynamic_shared_memory_size`` of the ``gpu.launch`` (the buffer
plus the 8-byte barrier), read from the module rather than assumed.
"""

import dataclasses
import functools
import re

import jax
import numpy as np
import pytest

from mosaic_async_store import pallas as mas_pallas
from mosaic_async_store.lowering import pallas_barriers
from mosaic_async_store.tools import toolchain
from kernel_text import retargeted_ptx
import pallas_run
from mosaic_async_store.tools.pallas_capture import (lower_pallas_to_mosaic_modules,
                                               lower_warpgroup_dialect)

from mosaic_async_store.check.interp import Memref, PtxKernel
from mosaic_async_store.check.params import array_of, buffer_slots
from mosaic_async_store.check.tensor_map import TensorMap
from mosaic_async_store.tools.check_kernel import kernel_parameters
from mosaic_async_store.check.memory import SCHEDULES
from ptx_harness import expect, findings_of, outputs

CASES = pallas_run.PALLAS_CASES + pallas_run.TENSOR_CORE_CASES
CLUSTER_WAIT = "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64"


def _launch(mlir: str) -> tuple[int, int]:
  """(CTAs along x, dynamic SMEM bytes) of the kernel's ``gpu.launch``."""
  launch = re.search(r"gpu\.launch .*blocks\([^)]*\) in \(%\w+ = (%\w+).*"
                     r"dynamic_shared_memory_size (%\w+)", mlir)
  return tuple(int(re.search(re.escape(v) + r" = arith\.constant (\d+)", mlir).group(1))
               for v in launch.groups())


@functools.lru_cache(maxsize=None)
def _lowered(case):
  """(ptx, mlir, smem_bytes) of ``case``'s kernel (built as run_case builds it)."""
  module, mlir = _module(case)
  ctas, smem_bytes = _launch(mlir)
  assert ctas == 2, f"the kernel launches {ctas} CTAs, the interpreter runs one 2-CTA cluster"
  return toolchain.compile_module(module, case.arch).ptx, mlir, smem_bytes


def _module(case):
  """(Lane-level module, its text) of ``case``'s kernel."""
  if case.installs:
    mas_pallas.install()
  try:
    with pallas_run.traced(case):
      kernel, _ = pallas_run.roundtrip_kernel(case)
      x, init = pallas_run.make_inputs(case)
      [module] = lower_pallas_to_mosaic_modules(
          kernel, jax.ShapeDtypeStruct(x.shape, x.dtype), jax.ShapeDtypeStruct(init.shape,
                                                                               init.dtype))
  finally:
    if case.installs:
      mas_pallas.uninstall()
  if case.semantics == "warpgroup":
    module = lower_warpgroup_dialect(module)
  return module, str(module)


def launch_args(mlir, buffers, swap=False):
  """The kernel's arguments over ``buffers`` (x, init, out) in its parameter order
  (``check_kernel.kernel_parameters``: memrefs, and the TMA descriptors its host code
  builds); ``swap``: its first two memrefs exchanged (a wrong order)."""
  args = [p if isinstance(p, TensorMap) else Memref(buffers[p])
          for p in kernel_parameters(mlir, buffers)]
  if swap:
    i, j = [n for n, a in enumerate(args) if isinstance(a, Memref)][:2]
    args[i], args[j] = args[j], args[i]
  return args


def case_args(case, mlir, swap=False):
  """``case``'s kernel's arguments over its inputs (``launch_args``), the index of
  ``out`` among the buffers a launch returns, and the bytes ``out`` must hold."""
  x, init = pallas_run.make_inputs(case)
  want = pallas_run.device_bytes(pallas_run.expected(case, x, init))
  out0 = np.full(want.shape, 0xA5, np.uint8)  # bytes the kernel never writes show as 0xA5
  buffers = [pallas_run.device_bytes(x), pallas_run.device_bytes(init), out0]
  args = launch_args(mlir, buffers, swap)
  out = next(i for i, a in enumerate(args) if array_of(a) is out0)
  return args, buffer_slots(args)[out], want.reshape(-1)


def run_case(case, ptx, mlir, smem_bytes, schedule=0, swap=False):
  """Runs ``ptx`` as ``case``'s kernel; returns (out bytes, want bytes, interpreter).
  Fails the test where the run broke a rule (``case_findings``: a kernel that must)."""
  args, out, want = case_args(case, mlir, swap)
  kernel = PtxKernel(ptx)
  got = outputs(kernel, args, cluster=2, smem_bytes=smem_bytes, schedule=schedule)
  return got[out].reshape(-1).view(np.uint8), want, kernel


def case_findings(case, ptx, mlir, smem_bytes, schedule=0):
  """The findings of ``ptx`` run as ``case``'s kernel (as ``run_case`` runs it); fails
  the test where there is none."""
  args, _, _ = case_args(case, mlir)
  return findings_of(ptx, args, cluster=2, smem_bytes=smem_bytes, schedule=schedule)


@pytest.mark.parametrize("schedule", SCHEDULES, ids=lambda s: f"schedule{s}")
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.describe())
def test_pallas_kernel_stores_exact_bytes(case, schedule):
  ptx, mlir, smem_bytes = _lowered(case)
  tma = pallas_run.tma_out(case)   # out by a TMA store
  assert ("cp.async.bulk." in ptx) == tma and ("wait_group" in ptx) == tma
  tensor = "cp.async.bulk.tensor" in ptx   # (else a plain bulk copy: out is a memref)
  memrefs = re.findall(r"\.param \.u64 (?:\.ptr \.align \d+ )?\w+_param_(\d+)", ptx)
  assert len(memrefs) == 9 * (1 + bool(case.atomic) + (not tensor))   # x (, init) (, out)
  out, want, kernel = run_case(case, ptx, mlir, smem_bytes, schedule)
  bad = np.flatnonzero(out != want)
  assert bad.size == 0, (f"{bad.size} bytes differ, first at {bad[:8].tolist()}: "
                         f"got {out[bad[:8]].tolist()} want {want[bad[:8]].tolist()}")
  assert kernel.timeouts == 0 and not kernel.calls
  assert (CLUSTER_WAIT in ptx) == case.installs   # install() also reroutes barrier_wait


@pytest.mark.parametrize("arch", [a for a in toolchain.ARCHS if a != toolchain.DEFAULT_ARCH])
@pytest.mark.parametrize("case", pallas_run.PALLAS_CASES, ids=lambda c: c.describe())
def test_pallas_runtime_kernel_assembles_for_blackwell(case, arch):
  """The Hopper GPU's Pallas kernels through ptxas for the other targets (their sm_90a
  PTX under the target's header, which is what mlir-opt emits for it: kernel_text.
  retargeted_ptx).  The tensor-core cases compile for sm_100a above; not for sm_103a,
  where mlir-opt 22's nvvm.tcgen05.fence (upstream's wait on such a barrier) is not
  supported."""
  ptx = retargeted_ptx(_lowered(case)[0], arch)
  assert toolchain.ptx_to_cubin(ptx, arch)[0][:4] == b"\x7fELF"


# The layouts upstream's layout inference rejects under Warpgroup semantics, which this
# project's store admits (lowering/pallas_layouts.py), in both semantics: one adversarial
# schedule in CI (every schedule with MAS_EMU_SLOW=1).
LAYOUT_SCHEDULES = SCHEDULES if len(SCHEDULES) > 3 else SCHEDULES[1:2]


@pytest.mark.parametrize("schedule", LAYOUT_SCHEDULES, ids=lambda s: f"schedule{s}")
@pytest.mark.parametrize("case", pallas_run.LAYOUT_CASES, ids=lambda c: c.describe())
def test_every_layout_lane_stores_stores_under_warpgroup_too(case, schedule):
  ptx, mlir, smem_bytes = _lowered(case)
  out, want, kernel = run_case(case, ptx, mlir, smem_bytes, schedule)
  bad = np.flatnonzero(out != want)
  assert bad.size == 0, f"{bad.size} bytes differ, first at {bad[:8].tolist()}"
  assert kernel.timeouts == 0 and not kernel.calls


# -- the check must be able to fail --------------------------------------------


def _case(**kw):
  return next(c for c in CASES if all(getattr(c, k) == v for k, v in kw.items()))


def test_wrong_parameter_order_is_caught():
  case = _case(semantics="lane", dtype="int32", atomic="min", api="mas")
  ptx, mlir, smem_bytes = _lowered(case)
  out, want, _ = run_case(case, ptx, mlir, smem_bytes, swap=True)   # x and init swapped
  assert np.count_nonzero(out != want) > 0


@pytest.mark.parametrize("schedule", SCHEDULES, ids=lambda s: f"schedule{s}")
@pytest.mark.parametrize("semantics", ["lane", "warpgroup"])
def test_reduction_without_cluster_sync_is_caught(semantics, schedule):
  """Without the cluster barrier after the SMEM initialisation, the peer's
  reductions race with the CTA's own init stores (or with its reads of them): in
  every schedule, since every reader of a byte is remembered."""
  case = _case(semantics=semantics, dtype="int32", atomic="min", api="mas")
  ptx, mlir, smem_bytes = _lowered(case)
  sync = "barrier.cluster.arrive.aligned;\n\tbarrier.cluster.wait.aligned;"
  assert ptx.count(sync) == 1
  [f, *_] = case_findings(case, ptx.replace(sync, ""), mlir, smem_bytes, schedule)
  assert f.rule in ("race", "early-read"), f


@pytest.mark.parametrize("schedule", SCHEDULES[:2])
def test_float_add_with_cta_scope_wait_is_caught(schedule):
  """The f32 add's plain red.shared::cluster is ordered by a .release.cluster
  arrive; upstream's wait (.acquire.cta) does not synchronize with it, which is
  why the store is refused without install()."""
  case = _case(dtype="float32", atomic="add")
  ptx, mlir, smem_bytes = _lowered(case)
  assert ptx.count(CLUSTER_WAIT) == 1
  cta_wait = ptx.replace(CLUSTER_WAIT, "mbarrier.try_wait.parity.shared::cta.b64")
  expect(case_findings(case, cta_wait, mlir, smem_bytes, schedule), rule="race")


@pytest.mark.parametrize("schedule", SCHEDULES, ids=lambda s: f"schedule{s}")
@pytest.mark.parametrize("semantics", ["lane", "warpgroup"])
def test_per_thread_arrivals_on_a_tensor_core_barrier_are_caught(semantics, schedule,
                                                                  monkeypatch):
  """Before this project followed upstream's convention, every thread arrived on an
  orders_tensor_core barrier of count 1: 127 arrivals too many."""
  from mosaic_async_store.lowering import pallas as rules
  case = next(c for c in pallas_run.TENSOR_CORE_CASES
              if c.semantics == semantics and c.api == "mas" and not c.atomic)
  monkeypatch.setattr(rules, "_arrival", lambda aval: "thread")
  ptx, mlir, smem_bytes = _lowered.__wrapped__(case)
  assert "tcgen05.fence::before_thread_sync" not in ptx
  # The first arrival completes the phase (or the next ones overrun it): data is read
  # before it lands, or arrivals spill into the next phase; either is reported.
  case_findings(case, ptx, mlir, smem_bytes, schedule)


def test_tensor_core_stores_arrive_once_per_warpgroup():
  """The PTX of every tensor-core case: the fence, the warpgroup barrier and one
  arrive (behind the elected thread's branch) per store form."""
  for case in pallas_run.TENSOR_CORE_CASES:
    ptx, _, _ = _lowered(case)
    arrives = re.findall(r"mbarrier\.arrive\.expect_tx\S*", ptx)
    forms = 2 if case.cta0 else 1     # cta0: the local and the peer form
    assert len(arrives) == forms, (case.describe(), arrives)
    assert ptx.count("tcgen05.fence::before_thread_sync;") == forms, case.describe()
    # The wait (upstream's, or install()'s cluster-scoped one) keeps the after-fence.
    assert ptx.count("tcgen05.fence::after_thread_sync;") == 1, case.describe()
    assert (CLUSTER_WAIT in ptx) == case.installs, case.describe()


# -- a fill published with Pallas' ClusterBarrier, then a reduction into the peer ----
#
# Every thread fills its SMEM, then plgpu.barrier_arrive / barrier_wait on a
# plgpu.ClusterBarrier, then reduces into the peer's SMEM: the kernel as a user writes
# it (pallas_run.CLUSTER_BARRIER_CASES).  Under install() the arrive is a warpgroup
# barrier and an elected .release.cluster arrive (lowering/pallas_barriers.py) and the
# wait acquires at cluster scope; without install() upstream's elected .release.cta
# arrive is the warning peer-arrive-cta (by the letter not morally strong with the
# wait; taken as ordering, docs/checker.md "Warnings"), and where Pallas puts no barrier
# of its own after the fill it releases no other thread's fill: a race.

CLUSTER_BARRIER_UNINSTALLED = tuple(
    dataclasses.replace(c, install=False) for c in pallas_run.CLUSTER_BARRIER_CASES
    # float add into a peer is refused without install(); upstream's own store is
    # another kernel than the one the user wrote against install().
    if c.api == "mas" and c.atomic != "add")


def _arrive_barrier(ptx: str) -> int:
  """The offset of the last ``bar.sync`` before the ClusterBarrier's arrive."""
  return ptx.rindex("bar.sync", 0, ptx.index(pallas_barriers.CLUSTER_ARRIVE))


@pytest.mark.parametrize("schedule", SCHEDULES, ids=lambda s: f"schedule{s}")
@pytest.mark.parametrize("case", pallas_run.CLUSTER_BARRIER_CASES, ids=lambda c: c.describe())
def test_a_cluster_barrier_publishes_the_fill_under_install(case, schedule):
  ptx, mlir, smem_bytes = _lowered(case)
  assert ptx.count(pallas_barriers.CLUSTER_ARRIVE) == 1 and CLUSTER_WAIT in ptx
  assert re.match(r"bar\.sync\s+%r\d+, 128;", ptx[_arrive_barrier(ptx):])  # the warpgroup's
  out, want, kernel = run_case(case, ptx, mlir, smem_bytes, schedule)
  bad = np.flatnonzero(out != want)
  assert bad.size == 0, f"{bad.size} bytes differ, first at {bad[:8].tolist()}"
  assert kernel.timeouts == 0 and not kernel.calls


@pytest.mark.parametrize("schedule", SCHEDULES, ids=lambda s: f"schedule{s}")
@pytest.mark.parametrize("case", CLUSTER_BARRIER_UNINSTALLED, ids=lambda c: c.describe())
def test_without_install_the_cluster_barrier_leaves_the_fill_racing(case, schedule):
  """The same kernel built without install(): upstream's arrive at .release.cta on the
  peer's barrier is the warning peer-arrive-cta; where Pallas puts no barrier of its own
  after the fill (unsafe_no_auto_barriers), the peer's red.async races the fill too."""
  ptx, mlir, smem_bytes = _lowered(case)
  assert pallas_barriers.CLUSTER_ARRIVE not in ptx
  assert "mbarrier.arrive.shared::cluster.b64" in ptx   # upstream's arrive, .release.cta
  found = case_findings(case, ptx, mlir, smem_bytes, schedule)
  assert "peer-arrive-cta" in {f.rule for f in found if f.severity == "warning"}, found
  errors = {f.rule for f in found if f.severity == "error"}
  if case.auto_barriers:
    assert not errors and {f.rule for f in found} == {"peer-arrive-cta"}, found
  else:
    assert errors and errors <= {"race", "early-read"}, found


@pytest.mark.parametrize("schedule", SCHEDULES, ids=lambda s: f"schedule{s}")
@pytest.mark.parametrize("broken", ["no warpgroup barrier", "cta scope"])
@pytest.mark.parametrize("case", [c for c in pallas_run.CLUSTER_BARRIER_CASES
                                  if not c.auto_barriers], ids=lambda c: c.describe())
def test_each_half_of_the_cluster_arrive_is_needed(case, broken, schedule):
  """Where Pallas puts no barrier of its own after the fill (unsafe_no_auto_barriers),
  the arrive's warpgroup barrier is the only thing that orders the other threads' fill
  before the elected arrive (without it: a race); and a .cta-scoped arrive does not
  synchronize with the peer's .acquire.cluster wait by the letter (the warning
  peer-arrive-cta, an error with strict).  Either one taken out of the PTX is reported."""
  ptx, mlir, smem_bytes = _lowered(case)
  if broken == "no warpgroup barrier":
    at = _arrive_barrier(ptx)
    before = ptx[:ptx.index(pallas_barriers.CLUSTER_ARRIVE)]
    assert before.count("bar.sync") == 2   # the barrier initialisation's, and the arrive's
    ptx = ptx[:at] + "// " + ptx[at:]
  else:
    ptx = ptx.replace(pallas_barriers.CLUSTER_ARRIVE, "mbarrier.arrive.shared::cluster.b64")
  found = case_findings(case, ptx, mlir, smem_bytes, schedule)
  errors = {f.rule for f in found if f.severity == "error"}
  if broken == "cta scope":
    assert not errors and {f.rule for f in found} == {"peer-arrive-cta"}, found
  else:
    assert errors and errors <= {"race", "early-read"}, found


def _predicated_arrive_kernel(predicate):
  """Each CTA of a 2-CTA cluster copies x[cta] to SMEM, arrives on a ClusterBarrier with
  ``predicate(cta)`` (jax 0.12's ``barrier_arrive(..., predicate=)``), waits on it and
  copies SMEM out: a barrier of two arrivals per CTA, one from each CTA."""
  import jax.numpy as jnp
  from jax.experimental.pallas import mosaic_gpu as plgpu
  shape = (64, 64)

  def body(x_ref, o_ref, smem, cluster_barrier):
    cta = jax.lax.axis_index("cluster")
    smem[...] = pallas_run.compat.pallas_load(x_ref.at[cta], optimized=False)
    plgpu.barrier_arrive(cluster_barrier, predicate=predicate(cta))
    plgpu.barrier_wait(cluster_barrier)
    pallas_run.compat.pallas_store(o_ref.at[cta],
                                   pallas_run.compat.pallas_load(smem, optimized=False))
  return plgpu.kernel(
      body, out_type=jax.ShapeDtypeStruct((2, *shape), jnp.int32), grid=(1,),
      grid_names=("g",), cluster=(2,), cluster_names=("cluster",),
      scratch_types=[plgpu.SMEM(shape, jnp.int32),
                     plgpu.ClusterBarrier(collective_axes=("cluster",))])


def _arrive_takes_a_predicate() -> bool:
  import inspect
  from jax.experimental.pallas import mosaic_gpu as plgpu
  return "predicate" in inspect.signature(plgpu.barrier_arrive).parameters


@pytest.mark.skipif(not _arrive_takes_a_predicate(),
                    reason="this jax's plgpu.barrier_arrive takes no predicate (jax 0.12 has one)")
def test_the_cluster_arrive_keeps_the_users_predicate():
  """Under install(), an arrive whose predicate is false for CTA 1 is not made: both
  CTAs' waits miss CTA 1's arrival and hang; with a predicate true everywhere the
  kernel is clean and copies x through."""
  from mosaic_async_store import check as mas_check
  x = np.arange(2 * 64 * 64, dtype=np.int32).reshape(2, 64, 64)
  mas_pallas.install()
  try:
    everywhere = mas_check.check(_predicated_arrive_kernel(lambda cta: cta >= 0), x)
    cta0_only = mas_check.check(_predicated_arrive_kernel(lambda cta: cta == 0), x)
  finally:
    mas_pallas.uninstall()
  assert everywhere.ok, str(everywhere)
  assert np.array_equal(everywhere.outputs[0], x)
  assert [f.rule for f in cta0_only.findings] == ["hang"] * 3, str(cta0_only)
