"""The plan layer: everything decided without MLIR.

dtypes and validation, the register and ref geometry, the PTX form tables, the
plan's data types, sub-byte regrouping and packing, the planner, the one bank
model, address planning, the independent verifier (``landing`` + ``verify``)
and the CPU executor.  Imports only ``errors`` and ``compat`` from outside.
"""
