"""Family: cluster launch control (``clusterlaunchcontrol.try_cancel`` /
``clusterlaunchcontrol.query_cancel``, sm_100a), the dynamic tile scheduler of Blackwell
kernels (jax's Pallas matmul uses it).

The checker runs each cluster of a grid in isolation, one after another, so no cluster
of the grid is ever left to cancel: the one exact answer to a cancellation request is
"failed", a legal outcome on hardware too (a request fails when no cluster is left to
cancel).  Modules: ``rules`` (the rules and the ISA sentences they rest on) and
``cancel`` (the handlers, the response and its asynchronous write).
"""

from mosaic_async_store.check.families.clc import cancel, rules
from mosaic_async_store.check.family import Family

__all__ = ["FAMILY"]

FAMILY = Family(
    "clc", cancel.OPCODES, rules=rules.RULES,
    state={"clc_failed": set},   # the CTAs that decoded a failed response (rules.AFTER_FAILURE)
    arch="sm_100a")
