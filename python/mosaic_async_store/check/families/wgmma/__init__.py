"""Family: WGMMA, the warpgroup's asynchronous matrix multiply-accumulate of sm_90a
(``wgmma.fence``, ``wgmma.mma_async``, ``wgmma.commit_group``, ``wgmma.wait_group``).

Modules: ``layout`` (the forms, the fragment and descriptor layouts, the rules with
their sources), ``mma`` (the handlers and a warpgroup's state), ``execute`` (an
operation run once its fourth warp issued it) and ``guard`` (the register guard: the
accumulators in flight, and ``.aligned`` across the warpgroup).
"""

from mosaic_async_store.check.families.wgmma import layout, mma
from mosaic_async_store.check.family import Family

__all__ = ["FAMILY"]

FAMILY = Family(
    "wgmma", mma.OPCODES, rules=layout.RULES,
    state={"wgmma": dict},   # (CTA, warpgroup) -> its WGMMA state (mma.Warpgroup)
    # wgmma.wait_group writes back the accumulators the wgmma.mma_async named
    unnamed_writes=("wgmma.",),
    arch="sm_90a", completion_groups=("wgmma group",))
