"""Compares a GPU's outputs with the checker's, kernel by kernel (issue 63).

Both sides are folders of ``.npz`` files, one per kernel, written by ``save``: the
checker's outputs (``checker_gpu.py cpu``, on a CPU, with the inputs it ran on) and the
GPU's (``checker_gpu.py gpu``, on the same inputs).  ``manifest.json`` in the checker's
folder names each kernel, its file and its ``Tolerance``: exact kernels (copies, integer
arithmetic, the store demo) must match bit for bit; a floating-point reduction (WGMMA
sums, attention) within ``|gpu - check| <= atol + rtol * |check|``, NaN matching NaN.
Elements the checker's side masks (``mask<i>``: an output the kernel writes only in
part) are not compared.

Arrays are stored as unsigned integers of their width with the dtype's name beside them
(``dtype<i>``), so bfloat16 and the other ml_dtypes types survive ``np.savez``.

    python test/harness/gpu_compare.py CHECK_DIR GPU_DIR [--json OUT.json]

prints one line per kernel and exits 1 when any comparison fails or has no output.
This module needs NumPy only (ml_dtypes for its types), no jax.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import sys

import numpy as np

__all__ = ["Tolerance", "EXACT", "Comparison", "save", "load", "compare_outputs",
           "compare_dirs", "write_manifest", "read_manifest", "main"]

MANIFEST = "manifest.json"


@dataclasses.dataclass(frozen=True)
class Tolerance:
  """How close a GPU output must be to the checker's: both 0 means bit for bit."""
  rtol: float = 0.0
  atol: float = 0.0

  @property
  def exact(self) -> bool:
    return self.rtol == 0.0 and self.atol == 0.0

  def __str__(self) -> str:
    return "exact" if self.exact else f"rtol={self.rtol:g} atol={self.atol:g}"


EXACT = Tolerance()


@dataclasses.dataclass(frozen=True)
class Comparison:
  """One kernel's verdict: ``mismatched`` of ``compared`` elements out of tolerance."""
  kernel: str
  ok: bool
  compared: int
  mismatched: int
  tolerance: str
  detail: str = ""


def _dtype(name: str) -> np.dtype:
  try:
    return np.dtype(name)
  except TypeError:   # bfloat16, float8_*: registered by ml_dtypes
    import ml_dtypes
    return np.dtype(getattr(ml_dtypes, name))


def save(path, outputs, inputs=(), masks=None) -> None:
  """Writes ``outputs`` (and ``inputs``; ``masks``: one boolean array or None per output,
  True where an element is not compared) to the ``.npz`` file ``path``."""
  data = {}
  for prefix, arrays in (("out", outputs), ("in", inputs)):
    for i, a in enumerate(arrays):
      a = np.ascontiguousarray(np.asarray(a))
      data[f"{prefix}{i}"] = a.view(f"u{a.dtype.itemsize}") if a.dtype.itemsize else a
      data[f"{prefix}dtype{i}"] = np.array(str(a.dtype))
  for i, m in enumerate(masks or ()):
    if m is not None:
      data[f"mask{i}"] = np.asarray(m, bool)
  np.savez(path, **data)


def load(path) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray | None]]:
  """(outputs, inputs, masks) of a file ``save`` wrote."""
  with np.load(path) as f:
    def arrays(prefix):
      out, i = [], 0
      while f"{prefix}{i}" in f:
        out.append(f[f"{prefix}{i}"].view(_dtype(str(f[f"{prefix}dtype{i}"]))))
        i += 1
      return out
    outs = arrays("out")
    return outs, arrays("in"), [f[f"mask{i}"] if f"mask{i}" in f else None
                                for i in range(len(outs))]


def _mismatches(got: np.ndarray, want: np.ndarray, tol: Tolerance) -> np.ndarray:
  """A boolean array: True where ``got`` is out of ``tol`` of ``want``."""
  if tol.exact or want.dtype.kind in "iub":   # (integers: a tolerance means nothing)
    width = f"u{want.dtype.itemsize}"
    return got.view(width) != want.view(width)
  g, w = got.astype(np.float64), want.astype(np.float64)
  with np.errstate(invalid="ignore"):
    close = np.isfinite(w) & (np.abs(g - w) <= tol.atol + tol.rtol * np.abs(w))
  both_nan = np.isnan(g) & np.isnan(w)
  same_inf = np.isinf(w) & (g == w)   # (an infinity: only itself is close)
  return ~(close | both_nan | same_inf)


def compare_outputs(kernel: str, want, got, tol: Tolerance = EXACT, masks=None) -> Comparison:
  """``got`` (the GPU's outputs; None: it left none) against ``want`` (the checker's)."""
  if got is None:
    return Comparison(kernel, False, 0, 0, str(tol), "no GPU output")
  if want is None:
    return Comparison(kernel, False, 0, 0, str(tol), "no check output")
  if len(got) != len(want):
    return Comparison(kernel, False, 0, 0, str(tol),
                      f"{len(got)} outputs, the checker's has {len(want)}")
  masks = list(masks or ()) + [None] * (len(want) - len(masks or ()))
  compared = bad = 0
  notes = []
  for i, (g, w, m) in enumerate(zip(got, want, masks)):
    g, w = np.asarray(g), np.asarray(w)
    if g.shape != w.shape or g.dtype != w.dtype:
      return Comparison(kernel, False, compared, bad, str(tol),
                        f"output {i}: {g.dtype}{list(g.shape)}, the checker's "
                        f"{w.dtype}{list(w.shape)}")
    wrong = _mismatches(g, w, tol)
    if m is not None:
      wrong = wrong & ~np.asarray(m, bool)
    n = int(wrong.sum())
    compared += int(w.size - (0 if m is None else np.asarray(m, bool).sum()))
    bad += n
    if n and not notes:
      at = np.argwhere(wrong)[0]
      notes.append(f"output {i}: {n} differ, first at {at.tolist()}: gpu {g[tuple(at)]!r} "
                   f"check {w[tuple(at)]!r}")
  return Comparison(kernel, bad == 0, compared, bad, str(tol), "; ".join(notes))


def write_manifest(folder, entries: dict) -> None:
  """``entries``: kernel name -> {"file": ..., "rtol": ..., "atol": ..., ...}."""
  pathlib.Path(folder, MANIFEST).write_text(json.dumps(entries, indent=1, sort_keys=True))


def read_manifest(folder) -> dict:
  return json.loads(pathlib.Path(folder, MANIFEST).read_text())


def compare_dirs(check_dir, gpu_dir) -> list[Comparison]:
  """Every kernel of ``check_dir``'s manifest against its file in ``gpu_dir`` (a kernel
  whose check did not pass carries its reason in the manifest's ``error``)."""
  rows = []
  for name, entry in sorted(read_manifest(check_dir).items()):
    tol = Tolerance(entry.get("rtol", 0.0), entry.get("atol", 0.0))
    if entry.get("error"):
      rows.append(Comparison(name, False, 0, 0, str(tol), f"no check output: {entry['error']}"))
      continue
    want, _, masks = load(pathlib.Path(check_dir, entry["file"]))
    gpu_file = pathlib.Path(gpu_dir, entry["file"])
    got = load(gpu_file)[0] if gpu_file.exists() else None
    rows.append(compare_outputs(name, want, got, tol, masks))
  return rows


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("check_dir")
  parser.add_argument("gpu_dir")
  parser.add_argument("--json", help="also write the rows to this file")
  args = parser.parse_args(argv)
  rows = compare_dirs(args.check_dir, args.gpu_dir)
  for r in rows:
    print(f"{'SAME' if r.ok else 'DIFF'} {r.kernel:<60} {r.tolerance:<22} "
          f"{r.mismatched}/{r.compared} {r.detail}"[:300])
  same = sum(r.ok for r in rows)
  print(f"{same} of {len(rows)} kernels: the GPU's outputs equal check's (within tolerance)")
  if args.json:
    pathlib.Path(args.json).write_text(json.dumps([dataclasses.asdict(r) for r in rows],
                                                  indent=1))
  return 0 if same == len(rows) else 1


if __name__ == "__main__":
  sys.exit(main())
