"""A finding at an instruction that library code built (``plgpu.emit_pipeline``'s TMA
copies) names the innermost line of the user's files that encloses it: the
``emit_pipeline`` call.  jax records no user frame for the pipeline's own equations
(their tracebacks hold a handful of jax's frames), so their ops carry only the
primitive's name and the PTX gave them the ``.loc`` before them, another statement's
line (jax 0.10) or none (jax 0.12); the lowering now gives them the location of the
equation that encloses them (tools/mlir_locations.py, ``enclosing_when_unknown``).  The
lines a finding must name are found from ``# <marker>`` comments or the kernel's source
text, never written as numbers.
"""

from __future__ import annotations

import inspect
import re

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

import tma_kernels
from mosaic_async_store import check as mas_check
from mosaic_async_store.check.findings import detailed


def _line(source_file: str, marker: str) -> str:
  """``file:line`` of the line of ``source_file`` that ends in ``# <marker>``."""
  with open(source_file) as f:
    [number] = [i for i, text in enumerate(f, 1) if text.rstrip().endswith(f"# <{marker}>")]
  return f"{source_file}:{number}"


def _line_in(function, text: str) -> str:
  """``file:line`` of the one line of ``function``'s source that holds ``text``."""
  lines, first = inspect.getsourcelines(function)
  [at] = [first + i for i, line in enumerate(lines) if text in line]
  return f"{inspect.getsourcefile(function)}:{at}"


_BLOCK, _STEPS = (64, 128), 4


def _store_left_reading():
  """Each step stores its input slot to the output by TMA and leaves the store in
  flight: the pipeline refills the slot (its TMA load, two steps later) while the
  store may still read it."""
  shape = (_BLOCK[0] * _STEPS, _BLOCK[1])

  def body(x_gmem, o_gmem):
    def step(indices, x_smem):
      rows = pl.ds(indices[0] * _BLOCK[0], _BLOCK[0])
      plgpu.copy_smem_to_gmem(x_smem, o_gmem.at[rows])  # <store>

    spec = pl.BlockSpec(_BLOCK, lambda i: (i, 0))
    plgpu.emit_pipeline(step, grid=(_STEPS,), in_specs=[spec],  # <pipeline>
                        max_concurrent_steps=2)(x_gmem)
    plgpu.wait_smem_to_gmem(0)

  kernel = plgpu.kernel(body, out_type=jax.ShapeDtypeStruct(shape, jnp.float32))
  return jax.jit(kernel), (np.arange(np.prod(shape), dtype=np.float32).reshape(shape),)


def test_a_race_at_the_pipelines_copy_names_the_users_emit_pipeline_line():
  fn, args = _store_left_reading()
  report = mas_check.check(fn, *args, schedules=1, jobs=1)
  at_copies = [f for f in report.findings   # (a TMA load: shared::cta or ::cluster)
               if re.search(r"cp\.async\.bulk\.tensor\.\dd\.shared::\w+\.global",
                            f.instruction or "")]
  assert at_copies, report
  pipeline = _line(__file__, "pipeline")
  for f in at_copies:
    assert f.source == pipeline, (f.source, pipeline, detailed(f))
  assert {f.other_source for f in at_copies} == {_line(__file__, "store")}, report


def test_the_pipelined_matmul_refilling_a_slot_early_names_its_line_and_the_fix():
  """Upstream's realistic matmul with delay_release=0: the pipeline's TMA load refills
  a slot a WGMMA still reads; the finding names the kernel's ``emit_pipeline`` line
  (the harness file is the user's here), the WGMMA's line as the other access, and
  the delay_release hint."""
  fn, args = tma_kernels.realistic_matmul(delay_release=0)
  report = mas_check.check(fn, *args, schedules=1, jobs=1)
  assert report.findings, report
  pipeline = _line_in(tma_kernels.realistic_matmul, "plgpu.emit_pipeline(")
  wgmma = _line_in(tma_kernels.realistic_matmul, "plgpu.wgmma(acc")
  for f in report.findings:
    assert (f.source, f.other_source) == (pipeline, wgmma), detailed(f)
    text = "\n".join(detailed(f))
    assert "hint: " in text and "delay_release=1" in text, text
