#!/usr/bin/env bash
# The one-call GPU check (issue 5): install without network, run the GPU tests
# and the benchmark, write logs and JSON under $OUT, print a short table last.
# Meant for the lent H200 (jax 0.11.x there, so it is also the jax 0.11 test):
#   device run:  bash scripts/gpu_check.sh          (timeout_s ~480; at most about
#   30 s install + 300 s tests + 90 s benchmark)
# On a CPU machine it still runs: the GPU tests show as skipped.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
start=$(date +%s)

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
} | tee "$OUT/env.txt"

# Install without touching the network; fall back to a path shim if the
# machine's setuptools cannot build an editable wheel offline, or builds one
# that misses the nested package mapping (setuptools < 68, which an offline
# --no-build-isolation install uses, maps only mosaic_async_store itself, so
# mosaic_async_store.lowering would not import).
$PY -m pip install --no-deps --no-build-isolation --no-index -e . >"$OUT/install.log" 2>&1 \
  || echo "pip install failed (see install.log)"
if ! $PY -c "import mosaic_async_store.lowering" 2>"$OUT/import-error.log"; then
  echo "mosaic_async_store.lowering does not import (last line of the error below);"
  echo "  using PYTHONPATH + a lowering/ symlink"
  tail -1 "$OUT/import-error.log"
  ln -sfn ../../lowering python/mosaic_async_store/lowering
  export PYTHONPATH="$PWD/python:${PYTHONPATH:-}"
fi
$PY -c "import jax, jaxlib, mosaic_async_store.lowering as l; print('jax', jax.__version__, 'jaxlib', jaxlib.__version__, jax.devices())" 2>&1 | tail -1 | tee -a "$OUT/env.txt"

# 1. Runtime tests: every config in test/gpu/configs.py and the Pallas checks
#    (test/harness/pallas_run.py, Lane and Warpgroup), each batch bounded in time
#    (170 + 60 + 45 s at most, inside the outer 300 s) and writing its JSON
#    lines straight into $OUT, so a timeout keeps what finished.
MAS_GPU_RESULTS="$OUT/runtime.jsonl" MAS_GPU_TIMEOUT=${MAS_GPU_TIMEOUT:-170} \
  MAS_PALLAS_RESULTS="$OUT/pallas.jsonl" MAS_PALLAS_TIMEOUT=${MAS_PALLAS_TIMEOUT:-60} \
  MAS_DEBUG_TIMEOUT=${MAS_DEBUG_TIMEOUT:-45} \
  timeout 300 $PY -m pytest -q -p no:cacheprovider test/gpu --junitxml="$OUT/gpu-tests.xml" \
  2>&1 | tee "$OUT/gpu-tests.log" | tail -25
tests_status=${PIPESTATUS[0]}
echo "pytest test/gpu exit status: $tests_status" | tee -a "$OUT/env.txt"

# 2. Bandwidth benchmark (if present in this checkout).
if [ -f bench/dsmem_bandwidth.py ]; then
  timeout ${MAS_BENCH_TIMEOUT:-90} $PY bench/dsmem_bandwidth.py --out "$OUT/bench.json" \
    2>&1 | tee "$OUT/bench.log" | tail -40
fi

echo "elapsed: $(( $(date +%s) - start )) s" | tee -a "$OUT/env.txt"
$PY scripts/gpu_summary.py "$OUT"
summary_status=$?
# Fails when any GPU test failed (debug-mode test and collection errors
# included) or the summary found missing or failing checks.
if [ "$tests_status" -ne 0 ]; then exit "$tests_status"; fi
exit "$summary_status"
