"""What the CPU and GPU FFT algorithms (``fft``, ``fft_tiled``) share: the accuracy of the idea. The tile plans
and fast transform lengths they share are in ``plan.py``.

The spectra round each product, and the error grows slowly with the transform length (log2(Th*Tw)). One table
for every pass. Worst normwise errors measured on the CPU (300 random layers up to 40x40 with kernels up to
7x7, N <= 4, both algorithms; and N2 64->64 7x7 56x56, ResNet-20's N32 16->16 3x3 32x32, N4 3->8 11x11 s4
128x128, N16 32->32 3x3 s2): float32 forward 3.0e-7, backward_data 3.1e-7, backward_filter 5.3e-7 (its sums
over N*Ho*Wo stay 10x inside); float64 2.5e-15, backward_filter 2.4e-14 (the lags' direct DFT sums Th terms
where an FFT sums log2 Th); float16 4.7e-4, the float16 result's rounding.
"""

#: normwise error allowed against the float64 reference, every pass, per dtype.
TOLERANCE = {"float16": 2e-3, "float32": 1e-5, "float64": 1e-12}
