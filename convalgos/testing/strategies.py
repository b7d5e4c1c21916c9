"""Hypothesis strategies for convolution layers, and seeded arrays for a layer.

``layers(**constraints)`` draws a validated ``ConvParams``: batch, channels, groups (grouped and depthwise
included), image size, kernel, stride, padding in every form ``ConvParams`` accepts (an int, a pair,
asymmetric pairs of pairs, ``"valid"``, ``"same"``), dilation and dtype. Every constraint takes

- nothing (``None``): drawn from the default range;
- a value: fixed, e.g. ``layers(kernel=(3, 3), stride=1, dtype="float32")``;
- a hypothesis strategy: drawn from it, e.g. ``layers(groups=st.sampled_from([1, "depthwise"]))``.

Shrinking leads to the simplest layer: each draw shrinks towards one image, one channel, a 1x1 kernel, stride
and dilation 1, zero padding and ``groups=1``, so a counterexample keeps only the feature that breaks it.

The arrays of a layer come from a seed, not from hypothesis: ``layer_arrays(p, seed)`` gives x, w and dy from
one generator, so every pass of one (layer, seed) sees the same numbers, and a failure is reproduced from its
``ConvParams`` and seed alone.
"""
from __future__ import annotations

import numpy as np
from hypothesis import assume
from hypothesis import strategies as st

from convalgos import ConvParams

#: dtypes a layer may be drawn in (float16 is computed in float32).
DTYPES = ("float32", "float64", "float16")
#: the forms of padding, simplest first: "pairs" is ((top, bottom), (left, right)), each 0..2.
PADDING_FORMS = ("pairs", "int", "pair", "valid", "same")
#: groups: an int, or "depthwise" (groups == C, one filter group per input channel).
GROUPS = (1, 2, 3, "depthwise")
#: the two operands each pass reads, from ``layer_arrays``.
OPERANDS = {"forward": ("x", "w"), "backward_data": ("dy", "w"), "backward_filter": ("x", "dy")}


def as_strategy(value, default):
    """A constraint as a strategy: None -> ``default``, a strategy -> itself, a value -> ``just(value)``."""
    if value is None:
        return default
    if isinstance(value, st.SearchStrategy):
        return value
    return st.just(value)


def pair_strategy(value, component):
    """A pair constraint (int or pair; None draws each side from ``component``) as a strategy of pairs."""
    if value is None:
        return st.tuples(component, component)
    return as_strategy(value, None).map(as_pair)


def as_pair(value) -> tuple[int, int]:
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise ValueError(f"expected an int or a pair, got {value!r}")
        return int(value[0]), int(value[1])
    return int(value), int(value)


def padding_forms(stride):
    """Padding in every form, simplest first (shrinks to no padding); "same" only at stride 1."""
    side = st.integers(0, 2)
    forms = [f for f in PADDING_FORMS if f != "same" or stride == (1, 1)]
    return st.sampled_from(forms).flatmap(lambda form: {
        "pairs": st.tuples(st.tuples(side, side), st.tuples(side, side)),
        "int": side,
        "pair": st.tuples(side, side),
        "valid": st.just("valid"),
        "same": st.just("same"),
    }[form])


def total_padding(padding, extent) -> tuple[int, int]:
    """Rows and columns a padding (any form) adds, for a kernel spanning ``extent``."""
    if padding == "valid":
        return 0, 0
    if padding == "same":
        return extent[0] - 1, extent[1] - 1
    if isinstance(padding, (tuple, list)) and all(isinstance(v, (tuple, list)) for v in padding):
        return sum(padding[0]), sum(padding[1])
    ph, pw = as_pair(padding)
    return 2 * ph, 2 * pw


@st.composite
def layers(draw, *, batch=None, groups=None, in_channels=None, out_channels=None, size=None, kernel=None,
           stride=None, padding=None, dilation=None, dtype=None,
           max_batch: int = 3, max_channels: int = 6, max_size: int = 12, max_kernel: int = 5) -> ConvParams:
    """A valid ``ConvParams``; each argument fixes or constrains one feature (module docstring).

    batch: N; groups: an int or "depthwise"; in_channels, out_channels: C and K (totals, divisible by groups);
    size: (H, W); kernel: (R, S); stride, dilation: int or pair; padding: any form ``ConvParams`` takes;
    dtype: "float32", "float64" or "float16". The ``max_*`` bound the default ranges.
    """
    dt = draw(as_strategy(dtype, st.sampled_from(DTYPES)))
    g = draw(as_strategy(groups, st.sampled_from(GROUPS)))
    N = draw(as_strategy(batch, st.integers(1, max_batch)))
    if g == "depthwise":                  # groups == C, Cg == 1, K a multiple of C
        C = draw(as_strategy(in_channels, st.integers(1, max_channels)))
        g, Cg = C, 1
        K = draw(as_strategy(out_channels, st.integers(1, 2).map(lambda m: m * C)))
    else:
        C = draw(as_strategy(in_channels, st.integers(1, max_channels).map(lambda cg: cg * g)))
        K = draw(as_strategy(out_channels, st.integers(1, max_channels).map(lambda kg: kg * g)))
        Cg = C // g
    assume(C % g == 0 and K % g == 0)
    R, S = draw(pair_strategy(kernel, st.integers(1, max_kernel)))
    strides = draw(pair_strategy(stride, st.integers(1, 3)))
    dh, dw = draw(pair_strategy(dilation, st.integers(1, 2)))
    pad = draw(as_strategy(padding, padding_forms(strides)))
    assume(pad != "same" or strides == (1, 1))
    extent = (dh * (R - 1) + 1, dw * (S - 1) + 1)
    extra = total_padding(pad, extent)
    # the padded image is at least the kernel's extent (sometimes exactly it), so every layer has an output
    low = [max(1, e - t) for e, t in zip(extent, extra)]
    default_size = st.tuples(*(st.integers(lo, max(max_size, lo)) for lo in low))
    H, W = draw(pair_strategy(size, None) if size is not None else default_size)
    assume(H >= low[0] and W >= low[1])
    return ConvParams.from_shapes((N, C, H, W), (K, Cg, R, S), stride=strides, padding=pad,
                                  dilation=(dh, dw), groups=g, dtype=dt)


def layer_arrays(p: ConvParams, seed: int = 0) -> dict[str, np.ndarray]:
    """x (N, C, H, W), w (K, C/g, R, S) and dy (N, K, Ho, Wo) of layer ``p``, standard normal, in ``p.dtype``,
    drawn in that order from ``numpy.random.default_rng(seed)``."""
    rng = np.random.default_rng(seed)
    shapes = {"x": p.in_shape, "w": p.weight_shape, "dy": p.out_shape}
    return {name: rng.standard_normal(shape).astype(p.dtype) for name, shape in shapes.items()}


def operands(p: ConvParams, op: str, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The two operands pass ``op`` reads, as ``convalgos.run(algorithm, op, a, b, p)`` takes them: (x, w) for
    "forward", (dy, w) for "backward_data", (x, dy) for "backward_filter" (from ``layer_arrays(p, seed)``)."""
    if op not in OPERANDS:
        raise ValueError(f"op must be one of {tuple(OPERANDS)}, got {op!r}")
    arrays = layer_arrays(p, seed)
    first, second = OPERANDS[op]
    return arrays[first], arrays[second]
