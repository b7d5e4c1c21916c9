"""The CPU registry: every built-in CPU algorithm, listed explicitly, in the order the tests, the tuner and the
reports see them. ``convalgos.ALGORITHMS`` is this registry; ``convalgos.register`` adds a user's algorithm.
"""
from __future__ import annotations

from .depthwise.cpu import Depthwise
from .direct.channels import DirectChannels
from .direct.cpu import Direct
from .fft.tiled import FFTTiled
from .fft.whole import FFT
from .im2col.cpu import Im2col
from .implicit_gemm.cpu import ImplicitGemm
from .registry import Registry
from .winograd.cpu import Winograd
from .winograd.fused import FusedWinograd

#: name -> CPU algorithm.
ALGORITHMS = Registry("cpu", [
    Direct(), DirectChannels(), Depthwise(), ImplicitGemm(), Im2col(), FFT(), FFTTiled(),
    Winograd(2), Winograd(4), Winograd(6), FusedWinograd(4),
])
