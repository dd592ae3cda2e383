"""How a finding names an mbarrier by the user's code (``check.lineinfo``): the
expression a source line passes as the barrier, and the lines that use it."""

import pytest

from mosaic_async_store.check.lineinfo import barrier_name, used_at


@pytest.mark.parametrize("line, name", [
    ("plgpu.barrier_wait(bar.at[0])", "bar.at[0]"),
    ("      plgpu.barrier_arrive(barriers.at[slot + 1])  # done", "barriers.at[slot + 1]"),
    ("mas_pallas.async_store_smem(x, smem, bar.at[0], cluster_idx=0,  # <reduce>",
     "bar.at[0]"),
    ("plgpu.copy_gmem_to_smem(x_ref.at[i], smem.at[i], barrier=bars.at[s])", "bars.at[s]"),
    ("plgpu.copy_gmem_to_smem(x_ref.at[i], smem.at[i], full_barrier)", "full_barrier"),
    ("smem[...] = jnp.zeros(SHAPE, jnp.int32)", None),   # no barrier on the line
    ("plgpu.barrier_wait(", None),                       # its argument on the next line
    ("x = compat.pallas_load(x_ref.at[cta],", None),
    ("", None),
])
def test_the_barrier_a_line_passes(line, name):
  assert barrier_name(line) == name


def test_used_at_names_the_barrier_and_groups_lines_by_file(tmp_path):
  kernel = tmp_path / "k.py"
  kernel.write_text("x = 1\nplgpu.barrier_wait(bars.at[i])\nplgpu.barrier_arrive(bars.at[i])\n"
                    "y = 2\n")
  sources = [f"{kernel}:3", None, f"{kernel}:2", f"{kernel}:4", f"{kernel}:2"]
  assert used_at(sources) == f" (the kernel's `bars.at[i]`, used at {kernel}:2, 3, 4)"


def test_used_at_without_line_info_says_nothing(tmp_path):
  assert used_at([None, None]) == ""
  plain = tmp_path / "p.py"
  plain.write_text("wait_somehow()\n")
  assert used_at([f"{plain}:1"]) == f" (used at {plain}:1)"
