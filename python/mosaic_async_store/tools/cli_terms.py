"""The library's refusals in the command line's terms: flags, not Python parameters.

An ``AsyncStoreError`` names the Python parameter (``swizzle=16 is not supported:
... Fix: pass optimized=False``); the CLI prints the same message with each
parameter that has a flag written as that flag (``--swizzle 16``, ``--unoptimized``)
and fixes that name what the CLI does not have rewritten to the flags that do the
same (a shape the swizzle tile does not divide: a ``--shape`` that is a multiple of
the tile, a smaller ``--swizzle``, or, where the array has dims to spare, a
``--ref-shape`` whose tile spans more of them; "allocate the ref with a tile": a
``--ref-shape`` in that tile).  ``CLI_TERMS`` is the table; the bad-input tests
(test/unit/test_cli.py) check that no Python-only spelling reaches the user.

Only messages about the project's store kernel, which the flags describe (``demo``,
``compile`` without FILE.py:FUNCTION), are rewritten: a user's kernel is refused in the
terms of its own Python code (``cli.main``; test/unit/test_kernel_refusals.py).
"""

from __future__ import annotations

import re

__all__ = ["CLI_TERMS", "in_cli_terms"]


def _flag_value(flag: str):
  def sub(m: re.Match) -> str:
    value = m.group(1)
    shape = re.fullmatch(r"\((\d+(?:, \d+)*),?\)", value)
    if shape:   # (64, 128) -> 64x128, as --shape takes it
      value = "x".join(shape.group(1).split(", "))
    return f"{flag} {value.strip(chr(39))}"
  return sub


def _dims(text: str) -> list[int]:
  return [int(d) for d in text.split(",") if d.strip()]


def _tile_fix(m: re.Match) -> str:
  """A shape the swizzle tile does not divide: the next shape that it does, and where
  the array has more dims than the tile, a ref whose tile spans enough of them."""
  dims, tile = _dims(m.group(1)), _dims(m.group(2))
  fixed = dims[:-len(tile)] + [-(-d // t) * t for d, t in zip(dims[-len(tile):], tile)]
  ref = _wider_tile_ref(dims, tile)
  fixes = [f"--shape {'x'.join(map(str, fixed))} (a multiple of {'x'.join(map(str, tile))})",
           "a smaller --swizzle", *([f"--ref-shape {'x'.join(map(str, ref))}"] if ref else [])]
  return (f"{m.group(0).split(' Fix:')[0]} Fix: pass {', '.join(fixes[:-1])} or {fixes[-1]}")


def _wider_tile_ref(dims: list[int], tile: list[int]) -> list[int] | None:
  """The array's ref tiled by its whole trailing dims and the swizzle row (the tile's
  minor dim), where those dims hold whole 8-row groups, as a swizzle needs; None if
  none do (or the swizzle row does not divide the minor dim)."""
  minor = tile[-1]
  if dims[-1] % minor:
    return None
  for k in range(len(dims) - 2, -1, -1):
    rows = dims[k:-1]
    if len(rows) + 1 > len(tile) and _product(rows) % 8 == 0:
      wide = [*rows, minor]
      outer = [d // t for d, t in zip(dims[k:], wide)]
      return [*dims[:k], *outer, *wide]
  return None


def _product(xs) -> int:
  out = 1
  for x in xs:
    out *= x
  return out


def _in_tiles(m: re.Match) -> str:
  return f"pass a --ref-shape in {'x'.join(map(str, _dims(m.group(1))))} tiles, or drop --ref-shape"


# (pattern, replacement) applied in order; a replacement may be a function.
CLI_TERMS = (
    (re.compile(r"shape=\((\d+(?:, \d+)*),?\) is not supported: allowed trailing dims "
                r"divisible by the swizzle tile \((\d+(?:, \d+)*),?\).*?Fix: pad the array, "
                r"use a smaller swizzle, or pass ref_shape"), _tile_fix),
    # The ref: only --ref-shape makes it differ from the canonical ref of --shape.
    (re.compile(r"\bref=shape (\(\d+(?:, \d+)*,?\))"), _flag_value("--ref-shape")),
    (re.compile(r"\bstore into a ref of the same logical shape \(slice the ref or reshape "
                r"the value\)"), "pass a --ref-shape that untiles to --shape, or drop "
     "--ref-shape"),
    (re.compile(r"\bpass a ref of the array's shape, or of its tiled shape"),
     "pass --ref-shape as --shape, or as --shape with trailing dims split into outer x tile"),
    (re.compile(r"\ballocate the ref(?: tiled)? with an? \((\d+(?:, \d+)*)\) tile"
                r"(?: \(plgpu\.TilingTransform \+ plgpu\.SwizzleTransform\(\d+\)\))?"), _in_tiles),
    (re.compile(r"\bref_shape=(\(\d+(?:, \d+)*,?\))"), _flag_value("--ref-shape")),
    (re.compile(r"\boptimized=False\b"), "--unoptimized"),
    (re.compile(r"\batomic=None\b"), "no --atomic"),
    (re.compile(r"\bpass e\.g\. \((\d+(?:, \d+)+)\)"),
     lambda m: "pass e.g. --shape " + "x".join(m.group(1).split(", "))),
    (re.compile(r"\boptimized=True\b"), "no --unoptimized"),
    (re.compile(r"\bstore without atomic=(?=$|[\s.,;])"), "drop --atomic"),
    (re.compile(r", or pass ref_shape\b"), ", or pass a --ref-shape whose tile divides it"),
    (re.compile(r"\buse a smaller swizzle\b"), "use a smaller --swizzle"),
    (re.compile(r"\bpad the array\b"), "pad --shape"),
    (re.compile(r"\bshape=(\(\d+(?:, \d+)*,?\))"), _flag_value("--shape")),
    (re.compile(r"\bswizzle=(\S+?)(?=[\s,.;:]|$)"), _flag_value("--swizzle")),
    (re.compile(r"\batomic=('?\w+'?)"), _flag_value("--atomic")),
    (re.compile(r"\bdtype=('?\w+'?)"), _flag_value("--dtype")),
    (re.compile(r"\blayout=('?\w+'?)"), _flag_value("--layout")),
    (re.compile(r"\barrival=('?\w+'?)"), _flag_value("--arrival")),
    (re.compile(r"\bcluster=(\d+)"), _flag_value("--cluster")),
    (re.compile(r"\boffset_rows=(-?\d+)"), _flag_value("--offset-rows")),
    (re.compile(r"\btransposed=True\b"), "--transposed"),
)


def in_cli_terms(message: str) -> str:
  """``message`` with the library's parameter spellings replaced by the CLI's flags,
  outside backquotes: a quoted source line (`` `plgpu.load(..., optimized=False)` ``)
  stays as written."""
  pieces = message.split("`")
  for i in range(0, len(pieces), 2):   # (the even pieces lie outside backquotes)
    for pattern, replacement in CLI_TERMS:
      pieces[i] = pattern.sub(replacement, pieces[i])
  return "`".join(pieces)
