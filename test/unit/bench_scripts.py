"""Loads a script of bench/ (not a package) as a module, for the tests."""

import importlib.util
import pathlib
import sys

BENCH = pathlib.Path(__file__).resolve().parents[2] / "bench"


def load(name: str):
  """``bench/<name>.py`` as module ``mas_bench_<name>`` (registered in sys.modules,
  where dataclasses look their module up)."""
  spec = importlib.util.spec_from_file_location(f"mas_bench_{name}", BENCH / f"{name}.py")
  module = importlib.util.module_from_spec(spec)
  sys.modules[spec.name] = module
  spec.loader.exec_module(module)
  return module
