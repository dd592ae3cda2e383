"""Element types the store understands, described without any MLIR context.

A dtype may be given as a NumPy/JAX dtype, a scalar type such as
``jnp.bfloat16``, or its name (``"bfloat16"``, ``"f8e4m3fn"``, ``"i4"``).
"""

from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np

from mosaic_async_store.errors import refuse, refuse_type

__all__ = ["DType", "as_dtype", "SUPPORTED_DTYPE_NAMES"]


@dataclasses.dataclass(frozen=True)
class DType:
  """What the planner needs to know about an element type."""

  name: str      # canonical NumPy name, e.g. "bfloat16", "float8_e4m3fn", "int4"
  bits: int      # 4, 8, 16, 32 or 64
  kind: str      # "float" | "int" | "uint"

  @property
  def is_float(self) -> bool:
    return self.kind == "float"

  @property
  def is_signed_int(self) -> bool:
    return self.kind == "int"

  @property
  def numpy(self) -> np.dtype:
    return np.dtype(getattr(ml_dtypes, self.name, None) or self.name)

  def __str__(self) -> str:
    return self.name


# Short names people type on a command line, mapped to NumPy names.
_ALIASES = {
    "f64": "float64", "f32": "float32", "f16": "float16", "bf16": "bfloat16",
    "i64": "int64", "i32": "int32", "i16": "int16", "i8": "int8", "i4": "int4",
    "u64": "uint64", "u32": "uint32", "u16": "uint16", "u8": "uint8",
    "u4": "uint4", "f8e4m3fn": "float8_e4m3fn", "f8e5m2": "float8_e5m2",
    "f4e2m1fn": "float4_e2m1fn", "f8e8m0fnu": "float8_e8m0fnu",
    "f8e4m3b11fnuz": "float8_e4m3b11fnuz", "f8e3m4": "float8_e3m4",
    "f8e4m3": "float8_e4m3", "f8e4m3fnuz": "float8_e4m3fnuz", "f8e5m2fnuz": "float8_e5m2fnuz",
}

SUPPORTED_DTYPE_NAMES = (
    "float64", "int64", "uint64", "float32", "int32", "uint32", "bfloat16",
    "float16", "int16", "uint16", "float8_e4m3fn", "float8_e5m2",
    "float8_e4m3b11fnuz", "float8_e8m0fnu", "float8_e3m4", "float8_e4m3",
    "float8_e4m3fnuz", "float8_e5m2fnuz",
    "int8", "uint8", "int4", "uint4", "float4_e2m1fn",
)

_ALLOWED = "one of " + ", ".join(SUPPORTED_DTYPE_NAMES) + " (or f32, bf16, i8, i4, ...)"


def _kind(np_dtype: np.dtype) -> str:
  if np.issubdtype(np_dtype, np.signedinteger) or np_dtype.name == "int4":
    return "int"
  if np.issubdtype(np_dtype, np.unsignedinteger) or np_dtype.name == "uint4":
    return "uint"
  return "float"


def as_dtype(dtype, param: str = "dtype") -> DType:
  """Normalises a dtype-like value, refusing anything the store cannot carry."""
  if isinstance(dtype, DType):
    return dtype
  if dtype is None or isinstance(dtype, bool):  # np.dtype(None) is float64
    raise refuse_type(param, dtype, _ALLOWED, "pass a NumPy/JAX dtype or its name")
  if isinstance(dtype, str):
    name = _ALIASES.get(dtype.lower(), dtype.lower())
  else:
    try:
      name = np.dtype(dtype).name
    except TypeError:
      raise refuse_type(param, dtype, _ALLOWED,
                        "pass a NumPy/JAX dtype or its name") from None
  if name not in SUPPORTED_DTYPE_NAMES:
    raise refuse(param, dtype if isinstance(dtype, str) else name, _ALLOWED,
                 "use one of the listed element types (bool and complex "
                 "arrays must be converted to an integer type first)")
  np_dtype = np.dtype(getattr(ml_dtypes, name, None) or name)
  bits = 4 if "4" in name and name.endswith(("int4", "e2m1fn")) else np_dtype.itemsize * 8
  return DType(name=name, bits=bits, kind=_kind(np_dtype))
