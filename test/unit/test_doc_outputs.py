"""docs/check-your-kernel.md shows what the checker prints: every marked output block is
made by scripts/doc_outputs.py, and compared here (exactly on the jax the page records,
by verdict on the others), so the page cannot drift from the checker again."""

import importlib.util
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _doc_outputs():
  spec = importlib.util.spec_from_file_location("doc_outputs", ROOT / "scripts" / "doc_outputs.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


@pytest.mark.long
def test_check_your_kernel_page_shows_what_the_checker_prints():
  import jax
  tool = _doc_outputs()
  page = (ROOT / "docs" / "check-your-kernel.md").read_text()
  assert len(tool.blocks(page)) == 4   # the correct kernel and the three mistakes
  assert tool.drift(page, jax.__version__) == []


def test_drift_is_found():
  """A changed output is drift: exactly on the recorded jax, by its rules elsewhere."""
  tool = _doc_outputs()
  page = ("<!-- generated with jax 9.9 -->\n<!-- output: python -c pass -->\n```\n"
          "1 finding(s) in schedules [0]:\n  [race] CTA 0 ...\n```\n")
  tool.run = lambda command: "1 finding(s) in schedules [0]:\n  [hang] CTA 0 ...\n"
  assert tool.drift(page, "9.9") and tool.drift(page, "1.0")
  tool.run = lambda command: "1 finding(s) in schedules [0]:\n  [race] CTA 1 ...\n"
  assert tool.drift(page, "9.9") and not tool.drift(page, "1.0")
