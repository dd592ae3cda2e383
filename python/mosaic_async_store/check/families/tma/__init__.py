"""Family: the TMA and bulk copies (``cp.async.bulk{.tensor}``, ``cp.reduce.async.bulk``,
``cp.async.bulk.commit_group`` / ``wait_group``, ``cp.async.bulk.prefetch``,
``prefetch.tensormap``).

Modules: ``forms`` (the grammar: ``decode_bulk``), ``examples`` (the forms run and
refused, as statements), ``geometry`` (a tensor copy's box, swizzle, out-of-bounds
elements), ``bulk_rules`` (size, alignment, multicast and mbarrier rules as pure
functions, each with its source), ``bulk_op`` (``BulkOp``: a copy, read and written
when it lands), ``bulk_groups`` (the completion of the copies into global memory:
``cp.async.bulk.commit_group`` / ``wait_group``) and ``copies`` (the handlers).
"""

from mosaic_async_store.check.families.tma import bulk_rules, copies
from mosaic_async_store.check.family import Family

__all__ = ["FAMILY"]

FAMILY = Family(
    "tma", copies.OPCODES,
    rules={name: source for name, (_, source) in bulk_rules.RULES.items()},
    state={"bulk": dict},   # thread slot -> its bulk groups (bulk_groups.BulkGroups)
    completion_groups=("bulk group",))
