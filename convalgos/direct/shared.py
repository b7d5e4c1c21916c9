"""What the CPU and GPU ``direct`` share: the idea's accuracy (it has no constraints: every layer runs).

Both sum every tap's product in order in the compute dtype (float16 in float32, rounded once at the end).
Measured float32 normwise errors on the CPU (random normal and uniform data): forward 1.3e-6 on C = 512 3x3
(14x14, 7x7 s2); backward-data <= 7.8e-7; backward-filter <= 4.2e-7 even on sums of 64*64*64 terms (vector lanes
and per-image partial sums), so no pass needs a wider tolerance. float16 (in float32) 3e-4; float64 3e-15.
"""

#: normwise error allowed against the float64 reference, every pass, per dtype.
TOLERANCE = {"float16": 2e-3, "float32": 5e-6, "float64": 1e-12}
