"""What splitting xor-formed address bases buys, per target (CPU only).

  python bench/split_addresses.py [--jobs J] [--every N] [--out FILE.md]

The measurement and its report are test/harness/split_report.py's (its docstring
says the method); the tests check them there.
"""

import sys

import harness_path  # noqa: F401  (test/harness on sys.path)
from split_report import main

if __name__ == "__main__":
  sys.exit(main())
