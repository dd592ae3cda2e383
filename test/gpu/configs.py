"""The runtime check matrix: each dtype family x layout family x swizzle x target x atomic.

Kept small enough to run in about two minutes on an H200 (each configuration
compiles one kernel); totals that are not multiples of 128 bytes and a cluster
of 4 are included on purpose.
"""

import json
import pathlib
import subprocess
import sys

from mosaic_async_store.demo.config import StoreConfig

S = StoreConfig

RUNTIME_CONFIGS = [
    S(),                                                       # the demo default
    S(impl="upstream"),                                        # upstream, same kernel
    S(dtype="float32"), S(dtype="float32", optimized=False),
    S(dtype="float16", swizzle=64), S(dtype="bfloat16", swizzle=32),
    S(dtype="bfloat16", swizzle=16, optimized=False),
    S(dtype="float64", layout="STRIDED", swizzle=None, shape=(64, 64)),
    S(dtype="int64", layout="STRIDED", swizzle=None, shape=(32, 64)),
    S(dtype="int8"), S(dtype="uint8", swizzle=64), S(dtype="float8_e4m3fn", layout="WGMMA_8BIT"),
    S(dtype="float8_e5m2", swizzle=32),
    S(dtype="float8_e4m3fnuz", layout="WGMMA_8BIT", swizzle=64),   # any 8-bit type is bytes
    S(dtype="int4", shape=(64, 256)), S(dtype="uint4", shape=(64, 256), swizzle=64),
    S(dtype="float4_e2m1fn", shape=(64, 256), swizzle=32),
    # 4-bit data whose byte halves sit in different registers of one thread
    S(dtype="int4", layout="TMEM_NATIVE_V1", shape=(128, 256)),
    S(dtype="float4_e2m1fn", layout="TMEM_NATIVE_V1", shape=(128, 64), swizzle=32),
    # ... and in two lanes (halves exchanged with shfl.sync.bfly before the store)
    S(dtype="int4", layout="WGMMA_TRANSPOSED", shape=(64, 256)),
    S(dtype="uint4", shape=(64, 64), transposed=True, swizzle=32, optimized=False),
    S(dtype="float4_e2m1fn", layout="TCGEN05", shape=(128, 64), transposed=True, swizzle=32,
      optimized=False),
    S(dtype="int4", layout="WGMMA_ROW", shape=(64,), swizzle=None),  # + replicas
    # threads holding under a word: lanes gather their partners' registers
    S(dtype="int8", layout="TMEM_NATIVE_V1", shape=(128, 1), swizzle=None),  # two gathers
    S(dtype="bfloat16", layout="TMEM_NATIVE_V1", shape=(128, 1), swizzle=None),
    S(dtype="int4", layout="TCGEN05_COL", shape=(16,), swizzle=None),        # 8 bytes in all
    S(dtype="int4", layout="SPLAT", shape=(64, 8), swizzle=None),
    # a one-column 4-bit array: lane pairs share one byte, gathered before the regrouping
    S(dtype="int4", layout="TMEM_NATIVE_V1", shape=(128, 1), swizzle=None),
    S(dtype="float4_e2m1fn", layout="TMEM_NATIVE_V1", shape=(128, 1), swizzle=None,
      target="local"),
    S(dtype="int16", layout="WGMMA_TRANSPOSED", shape=(64, 64), swizzle=64),
    S(transposed=True), S(dtype="float32", transposed=True, optimized=False),
    S(dtype="float32", layout="TMEM_NATIVE_V4", shape=(128, 64)),
    S(dtype="float32", layout="TCGEN05", shape=(128, 64)),
    S(layout="WGMMA_ROW", shape=(64,), swizzle=None),          # replicated: 128 bytes
    S(dtype="int8", layout="WGMMA_ROW", shape=(64,), swizzle=None),   # 64 bytes in all
    S(dtype="float32", layout="WGMMA_COL", shape=(24,), swizzle=None),  # 96 bytes
    S(layout="SPLAT", shape=(32, 64), swizzle=None),
    S(layout="STRIDED", shape=(64, 64), swizzle=None),
    S(target="local"), S(dtype="int8", target="local", swizzle=64),
    S(cluster=4), S(dtype="float32", cluster=4, swizzle=64),
    S(dtype="int32", atomic="add"), S(dtype="int32", atomic="min"),
    S(dtype="int32", atomic="max", target="local"), S(dtype="uint32", atomic="max"),
    S(dtype="int32", atomic="xor"), S(dtype="uint32", atomic="inc"),
    S(dtype="uint32", atomic="dec"), S(dtype="int64", atomic="add", layout="STRIDED",
                                        swizzle=None, shape=(32, 64)),
    S(dtype="float32", atomic="add"), S(dtype="float16", atomic="add"),
    S(dtype="bfloat16", atomic="add", swizzle=64),
    # every CTA reduces into CTA 0: red.async from the others, and in CTA 0 the
    # run-time branch's local form (plain red.shared::cta; red.async into the
    # executing CTA is undefined); CTA 0's barrier expects 128 * cluster arrivals
    S(dtype="int32", atomic="add", target="cta0", cluster=2),
    S(dtype="int32", atomic="add", target="cta0", cluster=4),
    S(dtype="int32", atomic="min", target="cta0", cluster=4),
    S(dtype="int32", atomic="max", target="cta0", cluster=1),  # statically local: no branch
    # reductions with a plain form into CTA 0: the others reduce with plain
    # red.shared::cluster (float adds, 64-bit min/max; ordered by the release arrive and
    # the cluster-scope wait), CTA 0's local arm with red.shared::cta
    S(dtype="float32", atomic="add", target="cta0", cluster=2),
    S(dtype="bfloat16", atomic="add", target="cta0", cluster=4, swizzle=64),
    S(dtype="uint64", atomic="max", target="cta0", layout="STRIDED", swizzle=None,
      shape=(32, 64)),
    # 64-bit and/or/xor as two 32-bit halves: red.async .b32 into a peer, red.shared::cta
    # .b32 into the executing CTA, and both behind CTA 0's branch
    S(dtype="int64", atomic="and", layout="STRIDED", swizzle=None, shape=(32, 64)),
    S(dtype="uint64", atomic="or", layout="STRIDED", swizzle=None, shape=(32, 64),
      target="local"),
    S(dtype="int64", atomic="xor", target="cta0", shape=(64, 64)),
    # the store's ref is a static slice of a larger allocation (memref offset)
    S(offset_rows=8),
    S(dtype="float32", layout="STRIDED", swizzle=None, shape=(64, 64), offset_rows=3),
]


def read_results(path: pathlib.Path) -> dict:
  """config name -> result, from a JSON-lines file; a line cut off by a kill is skipped."""
  out = {}
  for line in (path.read_text().splitlines() if path.exists() else []):
    try:
      res = json.loads(line)
    except json.JSONDecodeError:
      continue
    out[res["config"]] = res
  return out


HARNESS = pathlib.Path(__file__).resolve().parents[1] / "harness"


def harness_script(name: str) -> str:
  """The path of test/harness/<name>.py, run as a script (its folder then is on
  ``sys.path``, so its sibling imports work in a subprocess too)."""
  return str(HARNESS / f"{name}.py")


def run_batch(args: list[str], out: pathlib.Path, timeout_s: int) -> dict:
  """Runs ``python test/harness/<args[0]>.py <args[1:]> --out <out>`` (a batch that
  appends a JSON line per finished check) with a time limit; returns what
  finished (``read_results``).

  A hang or crash is cut off by the timeout, and the checks it never reached
  have no line, so the tests fail for exactly those.
  """
  out.unlink(missing_ok=True)
  try:
    subprocess.run([sys.executable, harness_script(args[0]), *args[1:], "--out", str(out)],
                   timeout=timeout_s,
                   check=False)
  except subprocess.TimeoutExpired:
    pass
  return read_results(out)
