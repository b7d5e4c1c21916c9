"""Numba helpers that several algorithm families share, below every family (they import none):

- ``simd``: one vector register as a Numba value (load, store, fma, splat, total);
- ``loops``: work sharing among threads, strided copies, valid index ranges, dot products;
- ``blocks``: register blocks of output channels x outputs (``direct`` and the fused Winograd);
- ``phases``: the polyphase geometry of backward-data (``direct`` and ``depthwise``).

A family's own kernels sit in its folder (``<family>/kernels.py``). Numba's cache does not follow a helper
inlined from another file: after editing one of these, delete ``convalgos/**/__pycache__/*.nbi`` and
``*.nbc``, or kernels that inline it keep running the old code.
"""
