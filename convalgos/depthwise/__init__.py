"""``depthwise``: one filter per input channel (groups == C), each pass plane by plane in per-thread buffers.

- ``cpu.py``: the CPU algorithm (the maths, FLOPs, workspace, when it goes channels-last);
- ``kernels.py``: the plane-by-plane Numba passes (forward's flat passes, backward-data's per-phase gathers,
  backward-filter's row dots);
- ``channels_last.py``: the channels-last forward pass for many channels on small planes.

No GPU twin: on the GPU, ``direct`` and ``implicit_gemm`` run depthwise layers (groups == C) as they run any.
"""
