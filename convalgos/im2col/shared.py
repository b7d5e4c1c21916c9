"""What the CPU and GPU ``im2col`` share: the idea's accuracy (no constraints beyond the workspace cap).

One tolerance for all three passes: the GEMM's sums (BLAS may reorder them). Measured float32 normwise errors
on the CPU (worst of the pass): 300 random test layers 4.7e-7 / 1.4e-7 / 4.2e-7 (forward / backward-data /
backward-filter); backward-filter, whose dw sums N*Ho*Wo products each, 3.9e-7 at N=32 C=K=64 32x32, 4.7e-7 at
N=1 C=K=256 28x28, 8.2e-7 at N=128 C=K=16 32x32 and 8.7e-7 at N=8 3->16 7x7/2 224x224 with x and dy all
positive (OpenBLAS's blocked sums).
"""

#: normwise error allowed against the float64 reference, every pass, per dtype.
TOLERANCE = {"float16": 2e-3, "float32": 5e-6, "float64": 1e-12}
