"""``fft`` and ``fft_tiled``: correlation as a product of spectra, the channel mixing a batched complex GEMM,
the stride by polyphase decomposition (CPU) or dense-then-subsampled (GPU).

- ``whole.py``: ``fft``, one transform per image, all three passes (the maths of each pass);
- ``tiled.py``: ``fft_tiled``, overlap-save over small tiles (the same passes on another plan);
- ``plan.py``: how a layer is cut into transforms (tile plans, fast lengths, workspace and FLOPs);
- ``spectra.py``: the kernel's pruned DFT; ``backward.py``: the backward passes' index maps and pruned inverse;
- ``kernels.py``: the Numba tile gathers and scatters;
- ``gpu.py``, ``gpu_tiled.py``: the GPU twins (cuFFT and cuBLAS through CuPy, Numba-CUDA gathers);
- ``shared.py``: what the twins share (the tolerance).
"""
