"""The library's refusals in the command line's terms: flags, not Python parameters.

An ``AsyncStoreError`` names the Python parameter (``swizzle=16 is not supported:
... Fix: pass optimized=False``); the CLI prints the same message with each
parameter that has a flag written as that flag (``--swizzle 16``, ``--unoptimized``)
and fixes that need a parameter the CLI does not have rewritten to the flags that
do the same (a ``ref_shape`` padded past the array: a ``--shape`` that is a multiple
of the tile, or a smaller ``--swizzle``).  ``CLI_TERMS`` is the table; the bad-input
tests (test/unit/test_cli.py) check that no Python-only spelling reaches the user.
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


def _tile_fix(m: re.Match) -> str:
  """A shape the swizzle tile does not divide: the next shape that it does."""
  dims = [int(d) for d in m.group(1).split(", ")]
  tile = [int(t) for t in m.group(2).split(", ")]
  fixed = dims[:-len(tile)] + [-(-d // t) * t for d, t in zip(dims[-len(tile):], tile)]
  return (f"{m.group(0).split(' Fix:')[0]} Fix: pass --shape {'x'.join(map(str, fixed))} "
          f"(a multiple of {'x'.join(map(str, tile))}) or a smaller --swizzle")


# (pattern, replacement) applied in order; a replacement may be a function.
CLI_TERMS = (
    (re.compile(r"shape=\((\d+(?:, \d+)*)\) is not supported: allowed trailing dims "
                r"divisible by the swizzle tile \((\d+(?:, \d+)*)\).*?Fix: pad the array, "
                r"use a smaller swizzle, or pass ref_shape"), _tile_fix),
    (re.compile(r"\boptimized=False\b"), "--unoptimized"),
    (re.compile(r"\batomic=None\b"), "no --atomic"),
    (re.compile(r"\bpass e\.g\. \((\d+(?:, \d+)+)\)"),
     lambda m: "pass e.g. --shape " + "x".join(m.group(1).split(", "))),
    (re.compile(r"\boptimized=True\b"), "no --unoptimized"),
    (re.compile(r"\bstore without atomic=(?=$|[\s.,;])"), "drop --atomic"),
    (re.compile(r", or pass ref_shape\b"), ", pass a --shape that is a multiple of it"),
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
  """``message`` with the library's parameter spellings replaced by the CLI's flags."""
  for pattern, replacement in CLI_TERMS:
    message = pattern.sub(replacement, message)
  return message
