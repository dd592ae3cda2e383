"""Everything that builds IR: the Lane store, the PTX emitters, the Pallas rules.

Imported lazily by the package face so that planning works without MLIR.
"""

from mosaic_async_store.lowering.store import async_store, emit_plan

__all__ = ["async_store", "emit_plan"]
