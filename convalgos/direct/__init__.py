"""``direct``: the defining sum of each pass, as loop nests over a zero-padded polyphase copy of the input.

- ``cpu.py``: the CPU algorithm (the maths of the three passes, FLOPs, workspace, measured trade-offs);
- ``kernels.py``: its Numba loop nests (the polyphase copy, the tap table, backward-filter's dots), built on
  the register blocks in ``convalgos.kernels.blocks``;
- ``gpu.py``: the GPU twin (shared-memory tiles of input and weight);
- ``shared.py``: what both share (the tolerance; the idea has no constraints).
"""
