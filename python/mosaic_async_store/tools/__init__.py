"""Tools around the store: the deviceless toolchain (mlir-opt, ptxas, cuobjdump),
the MLIR text bridge it needs (``mlir_skew``), PTX/SASS statistics, lowering of
Pallas kernels on a CPU machine (``pallas_capture``) and the CLI.
"""
