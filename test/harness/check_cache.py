"""A cache of the checker's runs across the stages of one CI run (.ci/run).

The checker (``mosaic_async_store.check``) never imports jax (test/checker/test_no_jax.py),
so one launch of one PTX text on the same buffers, keywords, checker code and NumPy gives
the same outputs and findings under every jax version.  What can differ between jax
versions is the PTX a kernel lowers to; that is what the later stages must run.  So
.ci/run's first stage runs the whole suite and records each launch here (``record``),
and the later stages lower, compile and capture every kernel again and run the checker
only where the PTX, the inputs or the launch differ from a recorded one (``replay``):
a kernel whose PTX changed with the jax version is checked anew.

``install(directory, mode)`` wraps ``PtxKernel.launch``.  The key is a hash of the
checker's source files, the NumPy and ml_dtypes versions, the PTX text, the buffers
(dtype, shape, bytes; ``Memref`` / ``TensorMap`` whole) and the keywords.  A recorded
entry holds the ``Launched`` result and what tests read of the machine after a launch
(``executed``, ``calls``, ``timeouts``, ``store_trace``, ``smem``).  Only completed
launches are recorded (a budget, a refusal or the checker's own error runs again).
A test that patches anything (it asks for pytest's ``monkeypatch``) runs without the
cache (test/conftest.py), since a patched checker is not the one the key names; so does
one marked ``no_check_cache``, which reads machine state not restored here (a restored
entry holds copies: ``TensorMap`` compares by identity).
Nothing in the package uses this.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import os
import pathlib
import pickle
import tempfile
import zlib

__all__ = ["install", "uninstall", "installed", "bypassed", "active", "MODES"]

MODES = ("record", "replay")
_BYPASS = contextvars.ContextVar("check_cache_bypass", default=False)
_MACHINE = ("executed", "calls", "timeouts", "store_trace", "smem")


@contextlib.contextmanager
def bypassed(bypass: bool = True):
  """Launches inside it run the checker, neither read nor recorded (``bypass=False``:
  they go through the cache, even inside an outer ``bypassed()``)."""
  token = _BYPASS.set(bypass)
  try:
    yield
  finally:
    _BYPASS.reset(token)


def _checker_digest() -> bytes:
  import ml_dtypes
  import numpy as np
  from mosaic_async_store import check
  h = hashlib.sha256(f"numpy {np.__version__} ml_dtypes {ml_dtypes.__version__}".encode())
  root = pathlib.Path(check.__file__).parent
  for path in sorted(root.rglob("*.py")):   # (the families' folders too)
    h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
  return h.digest()


def install(directory: str | os.PathLike[str], mode: str) -> None:
  """Wraps ``PtxKernel.launch`` with the cache in ``directory``: ``record`` writes every
  completed launch and reads none; ``replay`` also answers a launch recorded before."""
  from mosaic_async_store.check.interp import Launched, PtxKernel
  if mode not in MODES:
    raise ValueError(f"check cache mode {mode!r}: allowed {MODES}")
  if hasattr(PtxKernel.launch, "__wrapped__"):
    raise RuntimeError("the check cache is installed already (uninstall() first)")
  directory = pathlib.Path(directory)
  directory.mkdir(parents=True, exist_ok=True)
  digest = _checker_digest()
  init, launch = PtxKernel.__init__, PtxKernel.launch

  @functools.wraps(init)
  def remembering_init(self, text):
    self._cache_text = text
    init(self, text)

  @functools.wraps(launch)
  def cached_launch(self, buffers, **kwargs):
    text = getattr(self, "_cache_text", None)
    if _BYPASS.get() or text is None:
      return launch(self, buffers, **kwargs)
    try:
      key = hashlib.sha256(digest + pickle.dumps((text, list(buffers), sorted(kwargs.items())))
                           ).hexdigest()
    except (pickle.PicklingError, TypeError, AttributeError):
      return launch(self, buffers, **kwargs)
    file = directory / f"{key}.pickle.z"
    if mode == "replay" and file.exists():
      outputs, found, machine = pickle.loads(zlib.decompress(file.read_bytes()))
      for name, value in machine.items():
        setattr(self.machine, name, value)
      self.machine.findings = list(found)
      return Launched(outputs, found)
    result = launch(self, buffers, **kwargs)
    machine = {name: getattr(self.machine, name) for name in _MACHINE}
    fd, tmp = tempfile.mkstemp(dir=directory)
    with os.fdopen(fd, "wb") as f:
      f.write(zlib.compress(pickle.dumps((result.outputs, result.findings, machine)), 1))
    os.replace(tmp, file)   # atomic: another worker or stage reads a whole file or none
    return result

  PtxKernel.__init__, PtxKernel.launch = remembering_init, cached_launch
  global installed
  installed = (directory, mode)


installed = None   # (directory, mode) of the cache installed now, or None


def active() -> bool:
  """Whether a launch made here now goes through the cache (installed, not bypassed):
  what a test asks before it lets a subprocess use the cache too
  (test/harness/check_cache_plugin.py)."""
  return installed is not None and not _BYPASS.get()


def uninstall() -> tuple | None:
  """Puts ``PtxKernel`` back as it was before ``install``; returns what ``installed``
  was (to install it again)."""
  from mosaic_async_store.check.interp import PtxKernel
  global installed
  was, installed = installed, None
  if hasattr(PtxKernel.launch, "__wrapped__"):
    PtxKernel.__init__ = PtxKernel.__init__.__wrapped__
    PtxKernel.launch = PtxKernel.launch.__wrapped__
  return was
