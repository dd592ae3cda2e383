"""How much of a SASS count is ptxas' register allocation (CPU only).

  python bench/ptxas_allocation.py [--out docs/ptxas_allocation.md]

The measurement and its report are test/harness/ptxas_allocation_report.py's (its
docstring says the method); the tests check them there.
"""

import sys

import harness_path  # noqa: F401  (test/harness on sys.path)
from ptxas_allocation_report import main

if __name__ == "__main__":
  sys.exit(main())
