"""The deviceless toolchain under its public name: ``from mosaic_async_store
import toolchain``; ``toolchain.compile_module(module, arch="sm_90a")``.

A face over ``mosaic_async_store.tools.toolchain`` (where the code and its docs
live), so that the public import stays put while the tools sit in their layer.
"""

from mosaic_async_store.tools.toolchain import *  # noqa: F401,F403  (the face)
from mosaic_async_store.tools.toolchain import __all__  # noqa: F401
