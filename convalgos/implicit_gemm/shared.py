"""What the CPU and GPU ``implicit_gemm`` share: the idea's accuracy (no constraints: every layer runs, with no
workspace, which makes it the algorithm that always fits).

forward and backward_data sum their Cg*R*S (or Kg*R*S) products in a fixed order in the compute dtype, as
``direct`` does; backward_filter sums N*Ho*Wo products per weight (reassociated), like im2col's GEMM.
"""

#: normwise error allowed against the float64 reference, every pass, per dtype.
TOLERANCE = {"float16": 2e-3, "float32": 5e-6, "float64": 1e-12}
