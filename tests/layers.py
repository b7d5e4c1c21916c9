"""Random layers for the agreement tests: a hypothesis strategy and a seeded array maker."""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from convalgos import ConvParams


@st.composite
def layers(draw, max_hw: int = 12, max_channels: int = 6, max_kernel: int = 5, kernel=None, stride=None,
           dilation=None, max_batch: int = 3):
    """A valid ConvParams-building dict: every parameter drawn, asymmetric padding and N=0 included."""
    groups = draw(st.sampled_from([1, 1, 1, 2, 3]))
    depthwise = draw(st.booleans()) and groups > 1
    Cg = 1 if depthwise else draw(st.integers(1, max_channels))
    Kg = draw(st.integers(1, 2)) if depthwise else draw(st.integers(1, max_channels))
    R, S = kernel if kernel else (draw(st.integers(1, max_kernel)), draw(st.integers(1, max_kernel)))
    dh, dw = dilation if dilation else (draw(st.sampled_from([1, 1, 2])), draw(st.sampled_from([1, 1, 2])))
    sh, sw = stride if stride else (draw(st.sampled_from([1, 1, 2, 3])), draw(st.sampled_from([1, 1, 2])))
    pads = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in range(2))
    eh, ew = dh * (R - 1) + 1, dw * (S - 1) + 1
    # the padded input is at least the kernel's extent, sometimes exactly it
    H = draw(st.integers(max(1, eh - pads[0][0] - pads[0][1]), max(max_hw, eh)))
    W = draw(st.integers(max(1, ew - pads[1][0] - pads[1][1]), max(max_hw, ew)))
    N = draw(st.sampled_from([0] + list(range(1, max_batch + 1))))
    return dict(x_shape=(N, Cg * groups, H, W), w_shape=(Kg * groups, Cg, R, S), stride=(sh, sw),
                padding=pads, dilation=(dh, dw), groups=groups, bias=draw(st.booleans()))


def make_arrays(layer: dict, dtype, seed: int = 0):
    """x, weight and bias (or None) of the layer, seeded, in dtype."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(layer["x_shape"]).astype(dtype)
    w = rng.standard_normal(layer["w_shape"]).astype(dtype)
    b = rng.standard_normal(layer["w_shape"][0]).astype(dtype) if layer.get("bias") else None
    return x, w, b


def params_of(layer: dict, dtype="float32") -> ConvParams:
    return ConvParams.from_shapes(layer["x_shape"], layer["w_shape"], stride=layer["stride"],
                                  padding=layer["padding"], dilation=layer["dilation"], groups=layer["groups"],
                                  dtype=dtype)


def conv_kwargs(layer: dict) -> dict:
    return dict(stride=layer["stride"], padding=layer["padding"], dilation=layer["dilation"],
                groups=layer["groups"])
