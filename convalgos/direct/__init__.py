"""``direct``: the defining sum of each pass, as loop nests over a zero-padded polyphase copy of the input.

- ``cpu.py``: the CPU algorithm (the maths of the three passes, FLOPs, workspace, measured trade-offs);
- ``kernels.py``: its Numba loop nests (the polyphase copy, the tap table, backward-filter's dots), built on
  the register blocks in ``convalgos.kernels.blocks``;
- ``channels.py`` and ``channel_kernels.py``: ``direct_channels``, the same sum with the output channels in the
  vector lanes (8 pixels x 32 channels per register tile, x read in place: no phase copy, no junk columns);
  CPU only, forward and backward-data;
- ``gpu.py``: the GPU twin of ``direct`` (shared-memory tiles of input and weight);
- ``shared.py``: what both share (the tolerance; the idea has no constraints).
"""
