"""The store configuration on the command line: the flags of ``compile``, their argparse
types, and the ``StoreConfig`` they make.

Each argparse type turns a bad value into one readable line (argparse prefixes it with
``argument --flag:`` and the CLI exits with status 2); what only the configuration can
judge (a cluster too small for a peer, an atomic the dtype lacks) is refused by
``StoreConfig`` and reaches the user in the CLI's terms (``cli_terms``).
"""

from __future__ import annotations

import argparse
import re
from typing import Sequence

from mosaic_async_store.demo.config import LAYOUT_NAMES, TARGETS, StoreConfig
from mosaic_async_store.errors import AsyncStoreError
from mosaic_async_store.plan.dtypes import SUPPORTED_DTYPE_NAMES, as_dtype
from mosaic_async_store.plan.ptx_forms import ATOMIC_OPS
from mosaic_async_store.plan.validate import ARRIVALS, SWIZZLES
from mosaic_async_store.tools.cli_terms import in_cli_terms

__all__ = ["EXIT_MISUSE", "Refusal", "add_config_args", "add_arch_arg", "config_from_args",
           "glue_dash_values"]

EXIT_MISUSE = 2
_DEFAULT = StoreConfig()
# Flags whose value may start with '-' (a negative dim): see glue_dash_values.
_SHAPE_FLAGS = ("--shape", "--ref-shape")


class Refusal(Exception):
  """A one-line message and an exit status, raised anywhere below the CLI's main()."""

  def __init__(self, message: str, status: int = EXIT_MISUSE):
    super().__init__(message)
    self.status = status


# --- argument types: each turns a bad value into one readable line -----------


def _shape(text: str) -> tuple[int, ...]:
  parts = re.split(r"[x,]", text.strip().lower())
  if not all(p.strip().isdigit() for p in parts):
    raise argparse.ArgumentTypeError(
        f"malformed shape {text!r}: expected positive ints joined by 'x' or ','"
        " (e.g. 64x128)")
  return tuple(int(p) for p in parts)


def _ref_shape(text: str) -> tuple[int, ...]:
  shape = _shape(text)
  if not all(shape):
    raise argparse.ArgumentTypeError(
        f"--ref-shape {text} is not supported: allowed positive dims (the SMEM ref's "
        "shape, e.g. 8x2x8x64). Fix: drop the 0, or drop --ref-shape for the canonical "
        "ref of --shape")
  return shape


def _swizzle(text: str) -> int | None:
  if text.lower() == "none":
    return None
  if text.isdigit() and int(text) in SWIZZLES:
    return int(text)
  allowed = ", ".join(str(s) for s in SWIZZLES)
  raise argparse.ArgumentTypeError(
      f"invalid swizzle {text!r}: choose from {allowed}, none (bytes)")


def _dtype(text: str) -> str:
  try:
    as_dtype(text)
  except (AsyncStoreError, TypeError) as e:
    raise argparse.ArgumentTypeError(str(e)) from None
  return text


def _layout(text: str) -> str:
  return text.upper()


def add_config_args(p: argparse.ArgumentParser) -> None:
  """The flags of one store configuration, with ``StoreConfig()``'s defaults."""
  d = _DEFAULT
  shape = "x".join(map(str, d.shape))
  p.add_argument("--dtype", type=_dtype, default=d.dtype,
                 help=f"element type: {', '.join(SUPPORTED_DTYPE_NAMES)} or a short "
                 f"name (f32, bf16, i8, ...); default {d.dtype}")
  p.add_argument("--shape", type=_shape, default=d.shape,
                 help=f"array shape as 64x128 or 64,128 (default {shape})")
  p.add_argument("--ref-shape", type=_ref_shape, default=d.ref_shape, metavar="SHAPE",
                 help="the SMEM ref's (memref's) shape where it is not --shape's canonical "
                 "ref for --swizzle: the array's dims, the tiled trailing ones split into "
                 "outer x tile, e.g. 4x2x16x64 for --shape 64x128 in 16x64 tiles "
                 "(default: the canonical ref, 8x2x8x64 for the defaults)")
  p.add_argument("--layout", type=_layout, choices=LAYOUT_NAMES, default=d.layout,
                 metavar="LAYOUT", help=f"register layout, case-insensitive: "
                 f"{', '.join(LAYOUT_NAMES)} (default {d.layout})")
  p.add_argument("--swizzle", type=_swizzle, default=d.swizzle,
                 help=f"SMEM swizzle in bytes: 16, 32, 64, 128 or none (default {d.swizzle})")
  p.add_argument("--target", choices=TARGETS, default=d.target,
                 help="store into a peer CTA of the cluster, into the own CTA, or "
                 "(cta0, with --atomic) every CTA reduces into CTA 0, which branches at "
                 f"run time on whether the target is itself (default {d.target})")
  p.add_argument("--cluster", type=int, default=d.cluster,
                 help=f"CTAs in the cluster along x, 1..16 (default {d.cluster})")
  p.add_argument("--atomic", choices=ATOMIC_OPS, default=d.atomic,
                 help="reduce into the destination with this op (red.async) "
                 "instead of storing")
  p.add_argument("--offset-rows", type=int, default=d.offset_rows, metavar="N",
                 help="store into a slice of a larger SMEM ref that starts N rows in "
                 "(whole swizzle tiles; default 0)")
  p.add_argument("--transposed", action="store_true",
                 help="store through a transposed (column-major) view of the ref")
  p.add_argument("--unoptimized", action="store_true",
                 help="allow a plan with shared-memory bank conflicts (optimized=False)")
  p.add_argument("--impl", choices=("mas", "upstream"), default=d.impl,
                 help="this project's store (mas) or upstream's store_tiled_async")
  p.add_argument("--arrival", choices=ARRIVALS, default=d.arrival,
                 help="who arrives on the target barrier: every thread with its bytes "
                 "(thread), thread 0 with the warpgroup's after a warpgroup barrier "
                 "(warpgroup), or that after a tcgen05 fence (tensor_core: needs --arch "
                 f"sm_100a or sm_103a) (default {d.arrival})")
  p.add_argument("--full", action="store_true",
                 help="compile the whole test kernel (init, store, wait, copy-out); "
                 "default: only register loads + the store, for code-size stats")


def add_arch_arg(p: argparse.ArgumentParser) -> None:
  from mosaic_async_store.tools.toolchain import ARCHS, DEFAULT_ARCH
  p.add_argument("--arch", choices=tuple(ARCHS), default=DEFAULT_ARCH,
                 help="the GPU to compile for: sm_90a (Hopper), sm_100a, sm_103a "
                 f"(Blackwell) (default {DEFAULT_ARCH})")


def add_target_args(p: argparse.ArgumentParser) -> None:
  """--sm-count and --cuda-version: what the kernel's device queries are answered with
  (tools/device_target.py; defaults: an H100 for sm_90a, a B200 for sm_100a)."""
  p.add_argument("--sm-count", type=int, default=None, metavar="N",
                 help="with FILE.py:FUNCTION: the SM count the kernel's device.core_count "
                 "gets (default: the arch's GPU, 132 for sm_90a (H100), 148 for sm_100a "
                 "(B200))")
  p.add_argument("--cuda-version", default=None, metavar="MAJOR.MINOR",
                 help="with FILE.py:FUNCTION: the CUDA version the kernel's cuda_versions "
                 "queries get (default 13.0, the toolchain's ptxas)")


def config_from_args(args: argparse.Namespace) -> StoreConfig:
  """The ``StoreConfig`` of parsed ``compile`` flags; its refusals as a ``Refusal`` in
  the CLI's terms."""
  try:
    return StoreConfig(
        dtype=args.dtype, shape=args.shape, layout=args.layout, swizzle=args.swizzle,
        target=args.target, cluster=args.cluster, atomic=args.atomic,
        transposed=args.transposed, optimized=not args.unoptimized, impl=args.impl,
        offset_rows=args.offset_rows, arrival=args.arrival, ref_shape=args.ref_shape)
  except (AsyncStoreError, TypeError) as e:
    raise Refusal(in_cli_terms(str(e))) from None


def glue_dash_values(argv: Sequence[str]) -> list[str]:
  """``--shape -64x128`` -> ``--shape=-64x128`` (and so for ``--ref-shape``).

  argparse reads a value that starts with '-' and is not a plain number as
  the next option ("expected one argument"); glued, the value reaches the
  shape check, which says what is wrong with it.
  """
  out, i = [], 0
  while i < len(argv):
    if argv[i] in _SHAPE_FLAGS and i + 1 < len(argv) and re.match(r"-\d", argv[i + 1]):
      out.append(f"{argv[i]}={argv[i + 1]}")
      i += 2
    else:
      out.append(argv[i])
      i += 1
  return out
