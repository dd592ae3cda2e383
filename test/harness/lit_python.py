"""The Python of the lit suites' RUN lines (test/lit/lit.cfg.py's ``%PYTHON``).

    python -m lit_python SCRIPT [ARG ...]       # as ``python SCRIPT ARG ...``
    python -m lit_python -m MODULE [ARG ...]    # as ``python -m MODULE ARG ...``

It runs the script or module as plain ``python`` would, after installing the test
session's cache of mlir-opt / ptxas / cuobjdump results (test/harness/tool_cache.py)
where ``MAS_TEST_TOOL_CACHE`` names one (test/conftest.py sets it for pytest's
session, .ci/run for all its stages).  Compiling is most of a PTX RUN line's time, and
the tools' results depend only on the tool and its input: a kernel that a jax version
lowers to new IR is still compiled anew, one lowered as before reuses the result.
Without the variable (lit run by hand) nothing is cached.
"""

import os
import runpy
import sys


def main(argv: list[str]) -> None:
  where = os.environ.get("MAS_TEST_TOOL_CACHE")
  if where and where != "0":
    import tool_cache
    tool_cache.install(where)
  if argv[:1] == ["-m"] and len(argv) > 1:
    sys.argv = [argv[1], *argv[2:]]
    runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
  elif argv:
    sys.argv = list(argv)
    # ``python SCRIPT`` puts the script's folder first on the import path.
    sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
    runpy.run_path(argv[0], run_name="__main__")
  else:
    raise SystemExit("usage: python -m lit_python SCRIPT [ARG ...] | -m MODULE [ARG ...]")


if __name__ == "__main__":
  main(sys.argv[1:])
