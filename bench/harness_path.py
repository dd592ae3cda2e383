"""Puts test/harness on ``sys.path``: the one way bench/ reaches the code it shares
with the tests (the store kernels, the cost measurement, the configuration
matrix, the reports).  Each benchmark script imports it first.

The direction is one way: bench/ imports test/harness; test/harness and the tests
import nothing from bench/ (test/unit/test_layers.py checks both).
"""

import pathlib
import sys

HARNESS = pathlib.Path(__file__).resolve().parents[1] / "test" / "harness"
if str(HARNESS) not in sys.path:
  sys.path.insert(0, str(HARNESS))
