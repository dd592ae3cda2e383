#!/usr/bin/env bash
# The one-call GPU check (issues 5 and 63): install without network, run the GPU tests,
# the checker's kernels against the GPU and the bandwidth benchmark, write logs and JSON
# under $OUT, print a short table last.  Meant for the lent H200 (jax 0.11.x there, so it
# is also the jax 0.11 test).
#
#   On a CPU first:  bash scripts/gpu_check.sh [--kernels PATTERN ...]
#     runs the CPU half: check's outputs of every kernel (test/harness/checker_gpu.py
#     cpu; --kernels or MAS_CHECK_KERNELS: fnmatch patterns, default every kernel) into
#     $MAS_CHECK_OUTPUTS (default build/check-outputs), says what it skipped, exits 0.
#   Then on the GPU:  the device run with carry ["build/check-outputs"] and timeout_s
#     ~480: bash scripts/gpu_check.sh.  Every step is bounded and the whole call stays
#     inside MAS_GPU_BUDGET seconds (default 420: about 30 s install, at most 240 s
#     tests, 120 s checker kernels, 45 s broken kernels, 90 s benchmark, each cut to what
#     is left).  docs/gpu-results.md is where its numbers go.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
start=$(date +%s)
deadline=$(( start + ${MAS_GPU_BUDGET:-420} ))
CHECK_DIR=${MAS_CHECK_OUTPUTS:-build/check-outputs}
patterns=${MAS_CHECK_KERNELS:-}
if [ "${1:-}" = "--kernels" ]; then shift; patterns="$*"; fi

# bound WANT RESERVE: WANT seconds, or less: what is left before the deadline once
# RESERVE seconds are kept for the steps after (never under 10 s).
bound() {
  local left=$(( deadline - $(date +%s) - $2 ))
  if [ "$left" -lt "$1" ]; then echo $(( left > 10 ? left : 10 )); else echo "$1"; fi
}

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
} | tee "$OUT/env.txt"

# Install without touching the network (skipped where this checkout is what imports
# already); fall back to a path shim if the machine's setuptools cannot build an
# editable wheel offline, or builds one that misses the nested package mapping
# (setuptools < 68, which an offline --no-build-isolation install uses, maps only
# mosaic_async_store itself, so mosaic_async_store.lowering would not import).
if $PY -c "import sys, mosaic_async_store.lowering as l; sys.exit(not l.__file__.startswith('$PWD/'))" 2>/dev/null; then
  echo "mosaic_async_store: already installed from this checkout"
else
  timeout 120 $PY -m pip install --no-deps --no-build-isolation --no-index -e . >"$OUT/install.log" 2>&1 \
    || echo "pip install failed (see install.log)"
fi
if ! $PY -c "import mosaic_async_store.lowering" 2>"$OUT/import-error.log"; then
  echo "mosaic_async_store.lowering does not import (last line of the error below);"
  echo "  using PYTHONPATH + a lowering/ symlink"
  tail -1 "$OUT/import-error.log"
  ln -sfn ../../lowering python/mosaic_async_store/lowering
  export PYTHONPATH="$PWD/python:${PYTHONPATH:-}"
fi
$PY -c "import jax, jaxlib, mosaic_async_store.lowering as l; print('jax', jax.__version__, 'jaxlib', jaxlib.__version__, jax.devices())" 2>&1 | tail -1 | tee -a "$OUT/env.txt"
gpu=0
if $PY -c "import sys; from mosaic_async_store.demo.check import has_sm90_gpu; sys.exit(not has_sm90_gpu())" 2>/dev/null; then
  gpu=1
fi

# 0. The CPU half: check's outputs, computed where there is no GPU (so that no device
#    time goes to them) and carried to the GPU machine.  On a GPU machine without them
#    the comparison is skipped unless MAS_CHECK_ON_DEVICE=1 computes them there.
cpu_status=0
if [ "$gpu" = 0 ] || { [ ! -f "$CHECK_DIR/manifest.json" ] && [ "${MAS_CHECK_ON_DEVICE:-0}" = 1 ]; }; then
  echo "== check's outputs (CPU half) -> $CHECK_DIR =="
  t0=$(date +%s)
  rm -rf "$CHECK_DIR"
  # shellcheck disable=SC2086  (the patterns are words)
  timeout "${MAS_CHECK_CPU_TIMEOUT:-900}" $PY test/harness/checker_gpu.py cpu --out "$CHECK_DIR" \
    ${patterns:+--kernels $patterns} 2>"$OUT/check-cpu.err" | tee "$OUT/check-cpu.log" | tail -8
  cpu_status=${PIPESTATUS[0]}
  echo "check's outputs: exit status $cpu_status, $(( $(date +%s) - t0 )) s, $(grep -c '^ok' "$OUT/check-cpu.log") kernels written" | tee -a "$OUT/env.txt"
  [ "$cpu_status" -ne 0 ] && tail -3 "$OUT/check-cpu.err"
fi
[ -f "$CHECK_DIR/manifest.json" ] && cp "$CHECK_DIR/manifest.json" "$OUT/check-manifest.json"

if [ "$gpu" = 0 ]; then
  # shellcheck disable=SC2086
  $PY test/harness/checker_gpu.py list ${patterns:+--kernels $patterns} >"$OUT/checker-list.txt" 2>/dev/null
  $PY scripts/gpu_summary.py --skipped "$OUT"
  echo "elapsed: $(( $(date +%s) - start )) s" | tee -a "$OUT/env.txt"
  exit "$cpu_status"
fi

# 1. Runtime tests: every config in test/gpu/configs.py and the Pallas checks
#    (test/harness/pallas_run.py, Lane and Warpgroup), each batch bounded in time
#    (150 + 50 + 30 s at most, inside the outer 240 s) and writing its JSON
#    lines straight into $OUT, so a timeout keeps what finished.
MAS_GPU_RESULTS="$OUT/runtime.jsonl" MAS_GPU_TIMEOUT=${MAS_GPU_TIMEOUT:-150} \
  MAS_PALLAS_RESULTS="$OUT/pallas.jsonl" MAS_PALLAS_TIMEOUT=${MAS_PALLAS_TIMEOUT:-50} \
  MAS_DEBUG_TIMEOUT=${MAS_DEBUG_TIMEOUT:-30} \
  timeout "$(bound 240 150)" $PY -m pytest -q -p no:cacheprovider test/gpu --junitxml="$OUT/gpu-tests.xml" \
  2>&1 | tee "$OUT/gpu-tests.log" | tail -25
tests_status=${PIPESTATUS[0]}
echo "pytest test/gpu exit status: $tests_status" | tee -a "$OUT/env.txt"

# 2. The checker against the GPU: each kernel of check's outputs run on the GPU on the
#    same inputs (a process that hangs or crashes is started again after the kernel
#    it died in, at most twice), then compared (test/harness/gpu_compare.py).
compare_status=0
if [ -f "$CHECK_DIR/manifest.json" ]; then
  for attempt in 1 2 3; do
    resume=""; [ "$attempt" -gt 1 ] && resume="--resume"
    timeout "$(bound 120 110)" $PY test/harness/checker_gpu.py gpu --check "$CHECK_DIR" \
      --out "$OUT/gpu-outputs" --results "$OUT/checker.jsonl" $resume \
      2>>"$OUT/checker-gpu.err" | tee -a "$OUT/checker-gpu.log" | tail -3
    rc=${PIPESTATUS[0]}
    if [ "$rc" -le 1 ] || [ "$(bound 30 110)" -lt 30 ]; then break; fi
    echo "checker_gpu.py gpu: exit status $rc (a hang or a crash); going on after it"
  done
  $PY test/harness/gpu_compare.py "$CHECK_DIR" "$OUT/gpu-outputs" --json "$OUT/compare.json" \
    >"$OUT/compare.log" 2>&1
  compare_status=$?
else
  echo "no check outputs in $CHECK_DIR: run this script on a CPU first and carry the folder"
  echo "  (device run: carry [\"$CHECK_DIR\"]); the comparison is skipped"
fi

# 3. The broken kernels the checker reports, each run MAS_BROKEN_RUNS times (information).
timeout "$(bound 45 70)" $PY test/harness/checker_gpu.py broken --runs "${MAS_BROKEN_RUNS:-20}" \
  --results "$OUT/broken.jsonl" 2>"$OUT/broken.err" | tee "$OUT/broken.log" | tail -3

# 4. Bandwidth benchmark (if present in this checkout).
if [ -f bench/dsmem_bandwidth.py ]; then
  timeout "$(bound ${MAS_BENCH_TIMEOUT:-90} 5)" $PY bench/dsmem_bandwidth.py --out "$OUT/bench.json" \
    2>&1 | tee "$OUT/bench.log" | tail -40
fi

echo "elapsed: $(( $(date +%s) - start )) s" | tee -a "$OUT/env.txt"
$PY scripts/gpu_summary.py "$OUT"
summary_status=$?
# Fails when any GPU test failed (debug-mode test and collection errors included), the
# summary found missing or failing checks, or a GPU output differs from check's.
if [ "$tests_status" -ne 0 ]; then exit "$tests_status"; fi
if [ "$summary_status" -ne 0 ]; then exit "$summary_status"; fi
exit "$compare_status"
