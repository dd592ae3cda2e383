"""Static cost of the asynchronous store, ours vs upstream's store_tiled_async (CPU only).

  python bench/static_cost.py [--quick | --full [--every N]] [--jobs J] [--out docs/static_cost.md]

The comparison and its report are test/harness/static_cost_report.py's (its
docstring says the method); the tests check them there.
"""

import sys

import harness_path  # noqa: F401  (test/harness on sys.path)
from static_cost_report import main

if __name__ == "__main__":
  sys.exit(main())
