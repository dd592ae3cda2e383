"""The CLI's store kernel, in one place: a ``StoreConfig`` (plain data), the Mosaic
GPU kernel built for it (registers loaded from global memory, the store, a bounded
wait, the copy-out) and the runtime check the demo runs on an sm_90 GPU.

``mosaic-async-store compile`` and ``demo`` use it; test/ and bench/ build their
kernels and checks on it.  It sits above ``lowering`` (it calls ``async_store``)
and below the tools.
"""
