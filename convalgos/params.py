"""ConvParams: one convolution layer, validated and normalised once.

Every algorithm meets the same canonical form: NCHW input, (K, C/groups, R, S) weight, stride and dilation as
pairs, padding as ((top, bottom), (left, right)). Nothing downstream re-parses ``padding="same"``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: dtypes a caller may pass, and the dtype each is computed in.
COMPUTE_DTYPE = {"float16": "float32", "float32": "float32", "float64": "float64"}


def _pair(name: str, value) -> tuple[int, int]:
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        pair = (int(value), int(value))
    elif isinstance(value, (tuple, list)) and len(value) == 2 and all(
        isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in value
    ):
        pair = (int(value[0]), int(value[1]))
    else:
        raise TypeError(f"{name} must be an int or a pair of ints, got {value!r}")
    return pair


def _positive_pair(name: str, value) -> tuple[int, int]:
    pair = _pair(name, value)
    if min(pair) < 1:
        raise ValueError(f"{name} must be >= 1, got {value!r}")
    return pair


def _padding(value, kernel_extent: tuple[int, int], stride: tuple[int, int]):
    """Normalise padding to ((top, bottom), (left, right))."""
    if isinstance(value, str):
        if value == "valid":
            return ((0, 0), (0, 0))
        if value == "same":
            if stride != (1, 1):
                raise ValueError(f"padding='same' needs stride 1, got stride={stride}")
            # total = dilation*(k-1); torch puts the odd extra at the end (bottom/right).
            return tuple((t // 2, t - t // 2) for t in (e - 1 for e in kernel_extent))
        raise ValueError(f"padding must be an int, a pair, a pair of pairs, 'valid' or 'same', got {value!r}")
    if isinstance(value, (tuple, list)) and len(value) == 2 and all(isinstance(v, (tuple, list)) for v in value):
        pads = tuple(_pair("padding", v) for v in value)
    else:
        ph, pw = _pair("padding", value)
        pads = ((ph, ph), (pw, pw))
    if min(min(p) for p in pads) < 0:
        raise ValueError(f"padding must be >= 0, got {value!r}")
    return pads


@dataclass(frozen=True)
class ConvParams:
    """A 2-D convolution layer in canonical form (hashable: part of the autotuner's key).

    Shapes follow ``torch.nn.functional.conv2d``: x is (N, C, H, W), weight is (K, C/groups, R, S), y is
    (N, K, Ho, Wo) with Ho = (H + top + bottom - dilation_h*(R-1) - 1) // stride_h + 1 (likewise Wo).
    """

    N: int
    C: int
    H: int
    W: int
    K: int
    R: int
    S: int
    stride: tuple[int, int] = (1, 1)
    padding: tuple[tuple[int, int], tuple[int, int]] = ((0, 0), (0, 0))
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1
    dtype: str = "float32"

    @classmethod
    def from_shapes(cls, x_shape, w_shape, *, stride=1, padding=0, dilation=1, groups=1, dtype="float32"):
        """Validate a layer given by shapes; errors name the parameter and its value."""
        x_shape, w_shape = tuple(x_shape), tuple(w_shape)
        if len(x_shape) != 4:
            raise ValueError(f"x must be 4-D (N, C, H, W), got shape {x_shape}")
        if len(w_shape) != 4:
            raise ValueError(f"weight must be 4-D (K, C/groups, R, S), got shape {w_shape}")
        dtype = np.dtype(dtype).name
        if dtype not in COMPUTE_DTYPE:
            raise TypeError(f"dtype must be one of {sorted(COMPUTE_DTYPE)}, got {dtype}")
        if not isinstance(groups, (int, np.integer)) or isinstance(groups, bool) or groups < 1:
            raise ValueError(f"groups must be a positive int, got {groups!r}")
        N, C, H, W = (int(v) for v in x_shape)
        K, Cg, R, S = (int(v) for v in w_shape)
        groups = int(groups)
        if C % groups:
            raise ValueError(f"groups={groups} does not divide the input channels C={C}")
        if K % groups:
            raise ValueError(f"groups={groups} does not divide the output channels K={K}")
        if Cg * groups != C:
            raise ValueError(
                f"channel mismatch: x has C={C} channels but weight expects C/groups*groups={Cg}*{groups}={Cg * groups}"
            )
        if min(K, R, S, C, H, W) < 1:
            raise ValueError(f"empty layer: x shape {x_shape}, weight shape {w_shape}")
        stride = _positive_pair("stride", stride)
        dilation = _positive_pair("dilation", dilation)
        extent = (dilation[0] * (R - 1) + 1, dilation[1] * (S - 1) + 1)
        pads = _padding(padding, extent, stride)
        p = cls(N, C, H, W, K, R, S, stride, pads, dilation, groups, dtype)
        Ho, Wo = p.out_hw
        if Ho < 1 or Wo < 1:
            raise ValueError(
                f"output size below 1: got {Ho}x{Wo} for input {H}x{W}, padding={pads}, kernel {R}x{S}, "
                f"dilation={dilation}, stride={stride}"
            )
        return p

    @classmethod
    def from_arrays(cls, x, weight, bias=None, *, stride=1, padding=0, dilation=1, groups=1):
        """Validate a layer given by its arrays (x and weight must share one floating dtype)."""
        for name, a in (("x", x), ("weight", weight)):
            if not hasattr(a, "shape") or not hasattr(a, "dtype"):
                raise TypeError(f"{name} must be an array, got {type(a).__name__}")
            if np.dtype(a.dtype).name not in COMPUTE_DTYPE:
                raise TypeError(f"{name} dtype must be one of {sorted(COMPUTE_DTYPE)}, got {a.dtype}")
        if x.dtype != weight.dtype:
            raise TypeError(f"x and weight must have the same dtype, got x {x.dtype} and weight {weight.dtype}")
        p = cls.from_shapes(x.shape, weight.shape, stride=stride, padding=padding, dilation=dilation,
                            groups=groups, dtype=x.dtype)
        if bias is not None:
            if tuple(bias.shape) != (p.K,):
                raise ValueError(f"bias must have shape ({p.K},), got {tuple(bias.shape)}")
            if bias.dtype != x.dtype:
                raise TypeError(f"bias dtype must match x ({x.dtype}), got {bias.dtype}")
        return p

    # ---- derived sizes -------------------------------------------------------------------------------------
    @property
    def Cg(self) -> int:
        """Input channels per group."""
        return self.C // self.groups

    @property
    def Kg(self) -> int:
        """Output channels per group."""
        return self.K // self.groups

    @property
    def padded_hw(self) -> tuple[int, int]:
        (t, b), (l, r) = self.padding
        return self.H + t + b, self.W + l + r

    @property
    def kernel_extent(self) -> tuple[int, int]:
        """Height and width the dilated kernel spans."""
        return self.dilation[0] * (self.R - 1) + 1, self.dilation[1] * (self.S - 1) + 1

    @property
    def out_hw(self) -> tuple[int, int]:
        (Hp, Wp), (eh, ew) = self.padded_hw, self.kernel_extent
        return (Hp - eh) // self.stride[0] + 1, (Wp - ew) // self.stride[1] + 1

    @property
    def out_shape(self) -> tuple[int, int, int, int]:
        return (self.N, self.K) + self.out_hw

    @property
    def in_shape(self) -> tuple[int, int, int, int]:
        """x's shape, and backward-data's result's."""
        return self.N, self.C, self.H, self.W

    @property
    def weight_shape(self) -> tuple[int, int, int, int]:
        """w's shape, and backward-filter's result's."""
        return self.K, self.Cg, self.R, self.S

    def result_shape(self, op: str) -> tuple[int, int, int, int]:
        """The shape pass ``op`` writes: y for "forward", dx for "backward_data", dw for "backward_filter"."""
        return {"forward": self.out_shape, "backward_data": self.in_shape,
                "backward_filter": self.weight_shape}[op]

    @property
    def compute_dtype(self) -> str:
        """float16 is computed in float32; float32 and float64 in themselves."""
        return COMPUTE_DTYPE[self.dtype]

    @property
    def itemsize(self) -> int:
        """Bytes per element in the compute dtype."""
        return np.dtype(self.compute_dtype).itemsize

    @property
    def flops(self) -> int:
        """Direct-equivalent FLOPs: 2*N*K*(C/groups)*R*S*Ho*Wo (one multiply and one add per tap)."""
        Ho, Wo = self.out_hw
        return 2 * self.N * self.K * self.Cg * self.R * self.S * Ho * Wo

    @property
    def is_depthwise(self) -> bool:
        return self.groups == self.C and self.Cg == 1

    def with_batch(self, N: int) -> "ConvParams":
        """The same layer at another batch size (algorithms chunk over the batch)."""
        return ConvParams(N, self.C, self.H, self.W, self.K, self.R, self.S, self.stride, self.padding,
                          self.dilation, self.groups, self.dtype)

    def __str__(self) -> str:
        (t, b), (l, r) = self.padding
        pad = f"{t}" if t == b == l == r else f"({t},{b},{l},{r})"
        parts = [f"N{self.N} C{self.C} {self.H}x{self.W} -> K{self.K} {self.R}x{self.S}"]
        if self.stride != (1, 1):
            parts.append(f"s{self.stride[0]}" if self.stride[0] == self.stride[1] else f"s{self.stride}")
        if pad != "0":
            parts.append(f"p{pad}")
        if self.dilation != (1, 1):
            parts.append(f"d{self.dilation[0]}" if self.dilation[0] == self.dilation[1] else f"d{self.dilation}")
        if self.groups != 1:
            parts.append(f"g{self.groups}")
        parts.append(self.dtype)
        return " ".join(parts)
