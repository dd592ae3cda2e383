"""Grids and clusters of two and three dimensions: every CTA of every cluster reads the
special registers the PTX ISA gives it (%ctaid, %nctaid, %clusterid, %nclusterid,
%cluster_ctaid, %cluster_nctaid, %cluster_ctarank, %cluster_nctarank) and writes them
to its own row of the output; the checker runs the grid cluster by cluster."""

import itertools

import numpy as np
import pytest

from mosaic_async_store.check import check_ptx
from mosaic_async_store.errors import AsyncStoreError
from ptx_harness import kernel, launch

REGS = [f"%{r}.{a}" for r in ("ctaid", "nctaid", "clusterid", "nclusterid", "cluster_ctaid",
                              "cluster_nctaid") for a in "xyz"] + ["%cluster_ctarank",
                                                                   "%cluster_nctarank"]


def _ptx():
  body = ["  ld.param.u64 %rd1, [k_param_0];",
          # this CTA's row: its linear index in the grid, x fastest
          "  mov.u32 %r3, %ctaid.x;", "  mov.u32 %r4, %ctaid.y;", "  mov.u32 %r5, %ctaid.z;",
          "  mov.u32 %r6, %nctaid.x;", "  mov.u32 %r7, %nctaid.y;",
          "  mad.lo.u32 %r8, %r5, %r7, %r4;", "  mad.lo.u32 %r8, %r8, %r6, %r3;",
          f"  mul.lo.u32 %r8, %r8, {4 * len(REGS)};", "  cvt.u64.u32 %rd2, %r8;",
          "  add.s64 %rd1, %rd1, %rd2;"]
  for i, reg in enumerate(REGS):
    body += [f"  mov.u32 %r9, {reg};", f"  st.global.u32 [%rd1+{4 * i}], %r9;"]
  return kernel("\n".join(body))


def _expected(cluster, grid):
  rows = []
  for z, y, x in itertools.product(*(range(g) for g in grid[::-1])):
    cta, at = (x, y, z), (x % cluster[0], y % cluster[1], z % cluster[2])
    rows.append([*cta, *grid, *(c // s for c, s in zip(cta, cluster)),
                 *(g // s for g, s in zip(grid, cluster)), *at, *cluster,
                 at[0] + cluster[0] * (at[1] + cluster[1] * at[2]),
                 cluster[0] * cluster[1] * cluster[2]])
  return np.asarray(rows, np.uint32)


@pytest.mark.parametrize("cluster, grid", [((2, 1, 1), (4, 1, 1)), ((1, 2, 2), (2, 2, 4)),
                                           ((2, 2, 1), (4, 2, 3)), ((1, 1, 1), (3, 2, 1))])
def test_every_cta_reads_its_place_in_the_grid(cluster, grid):
  n = grid[0] * grid[1] * grid[2]
  report = check_ptx(_ptx(), [np.zeros(n * len(REGS), np.uint32)], smem_bytes=0,
                     block=(1, 1, 1), cluster=cluster, grid=grid, schedules=1)
  assert report.ok, str(report)
  got = report.outputs[0].view(np.uint32).reshape(n, len(REGS))
  np.testing.assert_array_equal(got, _expected(cluster, grid))


@pytest.mark.parametrize("cluster, grid, param", [
    ((2, 2, 1), (3, 2, 1), "grid"), ((4, 4, 2), None, "cluster"), ((2, 1, 1), None, "block")])
def test_a_launch_the_checker_cannot_run_is_refused_naming_the_parameter(cluster, grid, param):
  block = (32, 2, 1) if param == "block" else (32, 1, 1)
  with pytest.raises(AsyncStoreError, match=rf"^{param}="):
    check_ptx(_ptx(), [np.zeros(4096, np.uint32)], smem_bytes=0, block=block,
              cluster=cluster, grid=grid)


def test_a_cluster_given_its_first_shared_memory_still_reads_its_place_in_the_grid():
  """``smem_init`` (each CTA's first shared-memory bytes) leaves the cluster's place in
  the grid as ``first_cta`` says: the second cluster of a (2, 1, 1) grid of (1, 1, 1)
  clusters is CTA (1, 0, 0), cluster (1, 0, 0)."""
  grid = (2, 1, 1)
  out, found = launch(_ptx(), [np.zeros(2 * len(REGS), np.uint32)], cluster=1,
                      smem_bytes=16, block=1, smem_init=[bytes(range(16))],
                      first_cta=(1, 0, 0), grid_ctas=grid)
  assert not found, [f.explained for f in found]
  got = out[0].view(np.uint32).reshape(2, len(REGS))
  np.testing.assert_array_equal(got[1], _expected((1, 1, 1), grid)[1])
