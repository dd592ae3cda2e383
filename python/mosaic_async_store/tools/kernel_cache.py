"""The key under which ``check`` keeps a kernel's lowering (tools/check_kernel.py
``_lowered``): what determines the PTX that is in reach without lowering.

The key holds the function object itself (its identity), the values its closure and a
``functools.partial`` around it hold (each by type and value where hashable, a function
among them by the same key, to a depth of ``_DEPTH``), the arrays' shapes and dtypes,
the arch, ``sm_count``, ``cuda_version`` and jax's x64 flag.  A kernel with a value it
cannot key (an array, a list in its closure) has no key and is lowered every time.
What the function reads from module globals is not in the key: after patching such a
global, ``check_kernel.forget_lowerings()`` (the project's test suite does so around
every test that patches).
"""

from __future__ import annotations

import functools
import types

__all__ = ["lowering_key"]

_DEPTH = 4   # functions inside closures inside closures...: past it, the identity alone
_UNKEYED = object()


def lowering_key(fn, args, arch, sm_count, cuda_version):
  """The key of ``check(fn, *args, arch=..., sm_count=..., cuda_version=...)``'s
  lowering, or None where something in it cannot be keyed."""
  arrays = []
  for a in args:
    shape, dtype = getattr(a, "shape", None), getattr(a, "dtype", None)
    if shape is None or dtype is None:
      return None
    arrays.append((tuple(shape), str(dtype)))
  function = _callable_key(fn, 0)
  if not _keyed(function):
    return None
  return (function, tuple(arrays), arch, sm_count, cuda_version, _x64())


def _x64() -> bool:
  import jax
  return bool(jax.config.jax_enable_x64)


def _callable_key(obj, depth):
  """A callable's key: a partial by its function and values, a function by itself and
  its closure's and defaults' values, a wrapper (``__wrapped__``) by itself and what it
  wraps, anything else by itself where hashable (else ``_UNKEYED``)."""
  if isinstance(obj, functools.partial):
    return ("partial", _callable_key(obj.func, depth + 1), _values(obj.args, depth),
            _keywords(obj.keywords, depth))
  if isinstance(obj, types.FunctionType) and depth < _DEPTH:
    cells = []
    for cell in obj.__closure__ or ():
      try:
        cells.append(cell.cell_contents)
      except ValueError:   # (a cell not yet filled)
        cells.append(None)
    return ("function", obj, _values(cells, depth), _values(obj.__defaults__ or (), depth),
            _keywords(obj.__kwdefaults__ or {}, depth))
  wrapped = getattr(obj, "__wrapped__", None)
  if wrapped is not None and depth < _DEPTH:   # (jax.jit's functions, functools.wraps)
    return ("wrapper", _hashable(obj), _callable_key(wrapped, depth + 1))
  return _hashable(obj)


def _values(values, depth) -> tuple:
  return tuple(_value(v, depth) for v in values)


def _keywords(keywords: dict, depth) -> tuple:
  return tuple((k, _value(keywords[k], depth)) for k in sorted(keywords))


def _value(v, depth):
  """A value's key: a callable's (``_callable_key``), a tuple's element by element,
  anything else by its type and itself where hashable (1 and 1.0 and True differ)."""
  if callable(v) and not isinstance(v, type):
    return _callable_key(v, depth + 1)
  if isinstance(v, tuple):
    return ("tuple", type(v), _values(v, depth))
  hashed = _hashable(v)
  return hashed if hashed is _UNKEYED else (type(v), hashed)


def _hashable(obj):
  try:
    hash(obj)
  except TypeError:
    return _UNKEYED
  return obj


def _keyed(key) -> bool:
  """Whether ``key`` holds no ``_UNKEYED`` (in its tuples, at any depth)."""
  if key is _UNKEYED:
    return False
  if isinstance(key, tuple):
    return all(_keyed(k) for k in key)
  return True
