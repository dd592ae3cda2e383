"""Regenerates (or, with --check, compares) the command outputs shown in a docs page.

A page marks each output block with the command that prints it, on the line before
the block's opening fence:

    <!-- output: mosaic-async-store check docs/examples/reduce_into_cta0.py:make -->
    ```
    ...what that command prints...
    ```

Two kinds of command are run, from the repository root: ``mosaic-async-store ARGS``
(the CLI, in this process) and ``python FILE`` (a subprocess).  The page records the
jax version it was generated with (``<!-- generated with jax X -->``); PTX line numbers
and thread numbers depend on the PTX jax's lowering gives, so an exact comparison is
made only on that version, and on others the verdicts are compared: each block's first
line's finding count and each finding's rule, in order.

    python scripts/doc_outputs.py docs/check-your-kernel.md           # rewrite the page
    python scripts/doc_outputs.py docs/check-your-kernel.md --check   # exit 1 on drift
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
_BLOCK = re.compile(r"(<!-- output: (?P<command>.+?) -->\n```\n)(?P<output>.*?)(```)", re.S)
_VERSION = re.compile(r"<!-- generated with jax (?P<version>[\w.]+) -->")
_RULE = re.compile(r"^\s+\[([\w-]+)\]", re.M)


def run(command: str) -> str:
  """What ``command`` prints on stdout, run from the repository root."""
  words = command.split()
  if words[0] == "mosaic-async-store":
    from mosaic_async_store.tools import cli
    out = io.StringIO()
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
      with contextlib.redirect_stdout(out):
        cli.main(words[1:])
    finally:
      os.chdir(cwd)
    return out.getvalue()
  if words[0] == "python":
    env = dict(os.environ, JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.run([sys.executable, *words[1:]], cwd=ROOT, env=env,
                          capture_output=True, text=True, check=True).stdout
  raise ValueError(f"unknown command kind in a docs output marker: {command!r}")


def verdict(output: str) -> tuple[str, list[str]]:
  """An output's verdict: its first line's finding count (or 'ok') and the rules."""
  first = output.splitlines()[0] if output else ""
  count = re.search(r"(\d+) finding\(s\)|\bok: ", first)
  return (count.group(0) if count else first), _RULE.findall(output)


def blocks(page: str) -> list[tuple[str, str]]:
  """(command, shown output) of every marked block of ``page``."""
  return [(m["command"], m["output"]) for m in _BLOCK.finditer(page)]


def regenerate(page: str, jax_version: str) -> str:
  """``page`` with every marked block's output and the version marker made anew."""
  page = _BLOCK.sub(lambda m: m.group(1) + run(m["command"]) + m.group(4), page)
  return _VERSION.sub(f"<!-- generated with jax {jax_version} -->", page)


def drift(page: str, jax_version: str) -> list[str]:
  """What differs between the page and what its commands print now (empty: none)."""
  recorded = _VERSION.search(page)
  exact = recorded is not None and recorded["version"] == jax_version
  problems = []
  for command, shown in blocks(page):
    now = run(command)
    if exact and now != shown:
      problems.append(f"{command}: the page shows another output than it prints")
    elif not exact and verdict(now) != verdict(shown):
      problems.append(f"{command}: verdict {verdict(now)} on jax {jax_version}, the page "
                      f"shows {verdict(shown)}")
  return problems


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("page", type=pathlib.Path, help="the Markdown page")
  parser.add_argument("--check", action="store_true",
                      help="compare instead of rewriting; exit 1 on drift")
  args = parser.parse_args(argv)
  import jax
  page = args.page.read_text()
  if args.check:
    problems = drift(page, jax.__version__)
    print("\n".join(problems) or f"{args.page}: every output as shown")
    return 1 if problems else 0
  args.page.write_text(regenerate(page, jax.__version__))
  return 0


if __name__ == "__main__":
  os.environ.setdefault("JAX_PLATFORMS", "cpu")
  sys.exit(main())
