"""``fft`` and ``fft_tiled``: correlation as a product of spectra, the channel mixing a batched complex GEMM,
the stride by polyphase decomposition, on the CPU and the GPU alike.

- ``whole.py``: ``fft``, one transform per image, all three passes (the maths of each pass);
- ``tiled.py``: ``fft_tiled``, overlap-save over small tiles (the same passes on another plan);
- ``plan.py``: how a layer is cut into transforms (tile plans, fast lengths, tile sizes, batch chunks,
  workspace and FLOPs), for both twins;
- ``spectra.py``: the kernel's pruned DFT; ``backward.py``: the backward passes' index maps and pruned inverse
  (both take NumPy or CuPy arrays);
- ``kernels.py``: the Numba tile gathers and scatters;
- ``gpu.py``, ``gpu_tiled.py``: the GPU twins, all three passes (cuFFT and cuBLAS through CuPy);
  ``gpu_kernels.py``: their Numba-CUDA gathers and scatters;
- ``shared.py``: what the twins share besides the plans (the tolerance, the constraints).
"""
