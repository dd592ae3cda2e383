"""CSV and PNG of a bandwidth run (the JSON that bench/dsmem_bandwidth.py --out writes).

Run on the CPU after a GPU session brought its ``bench.json`` back:

    python bench/plot_bandwidth.py bench.json --csv docs/bandwidth.csv --png docs/bandwidth.png

The table and the plot are test/harness/bandwidth_plot.py's; the tests check them there.
"""

import sys

import harness_path  # noqa: F401  (test/harness on sys.path)
from bandwidth_plot import main

if __name__ == "__main__":
  sys.exit(main())
