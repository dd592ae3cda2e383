"""The configuration matrix: every layout x dtype x shape x swizzle x option, each
configuration compiled (or planned) and counted as accepted, refused or bad.

  python bench/matrix.py [--full] [--every N] [--jobs J] [--json out.json] [--plan-only]

The matrix and its runner are test/harness/config_matrix.py's (test/unit/test_matrix.py
runs a sample of it); docs/matrix.md records the full run.
"""

import sys

import harness_path  # noqa: F401  (test/harness on sys.path)
from config_matrix import main

if __name__ == "__main__":
  sys.exit(main())
