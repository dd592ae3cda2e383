"""The GPU a deviceless compile is for, as the kernel's own device queries see it.

Upstream kernels ask the device for its properties while they are traced:
``backend.get_default_device().core_count`` (the SM count that sizes a persistent
grid), ``jax.local_devices()[0].core_count``, ``cuda_versions.cuda_runtime_get_version()``
(attention's guard against a ptxas miscompilation), and Mosaic infers the arch it builds
for from ``compute_capability``.  On a CPU machine those reach the CPU device (which has
no ``core_count``) or a missing CUDA library.  ``compile`` and ``check`` answer them for
the target instead, with ``compat.answer_device_queries(target)`` while the kernel is
loaded, traced and lowered:

    target = device_target("sm_100a")                  # a B200: 148 SMs, CUDA 13.0
    target = device_target("sm_90a", sm_count=114)     # an H100 PCIe

The answered queries and their values are the table ``ANSWERED`` (docs/api.md).
"""

from __future__ import annotations

import dataclasses

from mosaic_async_store import errors

__all__ = ["DeviceTarget", "DEFAULTS", "ANSWERED", "device_target", "parse_cuda_version"]


@dataclasses.dataclass(frozen=True)
class DeviceTarget:
  """The properties of one GPU that a kernel may query while it is traced.

  Attributes:
    arch: the toolchain's target (``toolchain.ARCHS``), e.g. "sm_100a".
    device_kind: the name the device reports (``device.device_kind``).
    compute_capability: "major.minor" (``device.compute_capability``); Mosaic builds
      the kernel for this arch (``mosaic_gpu.arch_major`` / ``arch_minor``).
    sm_count: streaming multiprocessors (``device.core_count``).
    cuda_version: CUDA runtime and driver version as CUDA writes it, 1000 * major +
      10 * minor (``cuda_versions.cuda_runtime_get_version()``), e.g. 13000.
    smem_per_block: opt-in shared memory per block in bytes
      (``device.shared_memory_per_block_optin``; 227 KiB on sm_90a and sm_100a).
  """

  arch: str
  device_kind: str
  compute_capability: str
  sm_count: int
  cuda_version: int
  smem_per_block: int = 227 * 1024


# Per arch: the GPU whose properties a compile gets unless told otherwise.  CUDA 13.0 is
# the toolchain's own ptxas (nvidia-cuda-nvcc 13.0).
DEFAULTS: dict[str, DeviceTarget] = {
    "sm_90a": DeviceTarget("sm_90a", "NVIDIA H100 80GB HBM3", "9.0", 132, 13000),
    "sm_100a": DeviceTarget("sm_100a", "NVIDIA B200", "10.0", 148, 13000),
    "sm_103a": DeviceTarget("sm_103a", "NVIDIA B300", "10.3", 148, 13000),
}

# (the query as upstream code spells it, the property of DeviceTarget that answers it)
ANSWERED: tuple[tuple[str, str], ...] = (
    ("jax.extend.backend.get_default_device()", "a device with the properties below"),
    ("jax.devices(), jax.local_devices()", "[that device] (only while tracing)"),
    ("device.core_count", "sm_count"),
    ("device.compute_capability", "compute_capability (Mosaic's arch)"),
    ("device.device_kind", "device_kind"),
    ("device.platform", '"gpu"'),
    ("device.shared_memory_per_block_optin", "smem_per_block"),
    ("cuda_versions.cuda_runtime_get_version()", "cuda_version"),
    ("cuda_versions.cuda_driver_get_version()", "cuda_version"),
)


def parse_cuda_version(text: str) -> int:
  """``"12.8"`` -> 12080 (CUDA's 1000 * major + 10 * minor); ValueError otherwise."""
  major, dot, minor = text.partition(".")
  if not (major.isdigit() and (not dot or minor.isdigit())):
    raise ValueError(f"--cuda-version {text}: expected MAJOR.MINOR, e.g. 12.8")
  return 1000 * int(major) + 10 * int(minor or 0)


def device_target(arch: str, *, sm_count: int | None = None,
                  cuda_version: int | None = None) -> DeviceTarget:
  """The default GPU of ``arch`` (``DEFAULTS``), with ``sm_count`` and ``cuda_version``
  (1000 * major + 10 * minor) replaced where given.

  Raises:
    AsyncStoreError / TypeError: an unknown arch, or a count that is not a positive int.
  """
  from mosaic_async_store.tools.toolchain import check_arch
  target = DEFAULTS[check_arch(arch)]
  for name, value in (("sm_count", sm_count), ("cuda_version", cuda_version)):
    if value is None:
      continue
    if not isinstance(value, int) or isinstance(value, bool):
      raise errors.refuse_type(name, value, "an int", f"pass {name}={getattr(target, name)}")
    if value < 1:
      raise errors.refuse(name, value, "a positive int", f"pass {name}="
                          f"{getattr(target, name)} ({target.device_kind}'s)")
    target = dataclasses.replace(target, **{name: value})
  return target
