# Lit configuration for the FileCheck suites in test/lit: one file per instruction
# family, each with an IR RUN line (CHECK) and a PTX RUN line (PTX).
# Only suffixes, substitutions and features live here (MLIR's habit).
#
# Features: one per tool of the deviceless toolchain that toolchain.find_tool finds
# (filecheck, mlir-opt, ptxas, cuobjdump).  Each lit file says the tools its RUN lines
# run with `REQUIRES:`, so without one the file is UNSUPPORTED, not FAIL (the PTX
# lines compile with mlir-opt, ptxas and cuobjdump: toolchain.compile_module).

import os
import sys

import lit.formats

config.name = "mosaic-async-store"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".py"]
config.test_source_root = os.path.dirname(__file__)
config.excludes = ["lit.cfg.py", "__init__.py"]

# tool (toolchain.find_tool's name) -> lit feature
TOOL_FEATURES = {"FileCheck": "filecheck", "mlir-opt": "mlir-opt", "ptxas": "ptxas",
                 "cuobjdump": "cuobjdump"}


def _find_tools():
  """tool -> path, for each tool of TOOL_FEATURES that find_tool finds (its env
  variable, PATH, the pip wheels); a missing one is left out."""
  from mosaic_async_store.tools import toolchain
  found = {}
  for tool in TOOL_FEATURES:
    try:
      found[tool] = str(toolchain.find_tool(tool))
    except toolchain.ToolchainError:
      pass
  return found


_tools = _find_tools()
config.available_features.update(TOOL_FEATURES[t] for t in _tools)
_missing = sorted(TOOL_FEATURES[t] for t in TOOL_FEATURES if t not in _tools)
if _missing:
  lit_config.note(f"tools not found, files that require them are UNSUPPORTED: {_missing}")

# RUN lines' Python: test/harness/lit_python.py runs the script or module as plain
# `python` would, sharing the test session's cache of tool results (MAS_TEST_TOOL_CACHE).
config.substitutions.append(("%PYTHON", f"{sys.executable} -m lit_python"))
config.substitutions.append(("FileCheck", _tools.get("FileCheck", "FileCheck") +
                             " --enable-var-scope"))
for var in ("PATH", "HOME", "PYTHONPATH", "MAS_MLIR_OPT", "MAS_PTXAS", "MAS_CUOBJDUMP",
            "MAS_FILECHECK", "MAS_TEST_TOOL_CACHE", "JAX_PLATFORMS", "TMPDIR"):
  if var in os.environ:
    config.environment[var] = os.environ[var]
config.environment.setdefault("JAX_PLATFORMS", "cpu")
# The lit helpers (test/harness: kernel_text.py, the store kernels) are not shipped:
# on the tests' import path only.
_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
config.environment["PYTHONPATH"] = os.pathsep.join(
    p for p in (os.path.join(_root, "test", "harness"), config.environment.get("PYTHONPATH"))
    if p)
config.environment["TF_CPP_MIN_LOG_LEVEL"] = "3"
