"""``depthwise``: one filter per input channel (groups == C), each pass plane by plane in per-thread buffers.

- ``cpu.py``: the CPU algorithm (the maths, FLOPs, workspace);
- ``rows.py``: the forward pass, four output rows of vectors at a time from a buffered plane;
- ``kernels.py``: the backward passes plane by plane (backward-data's per-phase gathers, backward-filter's row
  dots).

No GPU twin: on the GPU, ``direct`` and ``implicit_gemm`` run depthwise layers (groups == C) as they run any.
"""
