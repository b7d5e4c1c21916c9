"""Cook-Toom generator: the Winograd minimal-filtering matrices of F(m, r), in exact rational arithmetic.

F(m, r) computes m outputs of an r-tap correlation, ``y_i = sum_j d_{i+j} g_j`` (i < m, j < r), from
``alpha = m + r - 1`` inputs with only ``alpha`` multiplications (m*r directly):

    y = A^T [ (G g) * (B^T d) ]          A^T: m x alpha,  G: alpha x r,  B^T: alpha x alpha

and nested along both axes, F(m x m, r x r) is ``Y = A^T [ (G g G^T) * (B^T d B) ] A`` with alpha^2
multiplications for m^2 outputs (m^2 r^2 directly).

Construction (Toom-Cook, as in Lavin & Gray 2016). Linear convolution of a length-m sequence h with g is the
product of the polynomials h(x) g(x), of degree alpha - 1. Evaluate both at alpha - 1 finite points a_i and
"at infinity" (the leading coefficient), multiply the values pointwise, and interpolate back:

    s = V^{-1} [ (V_r g) * (V_m h) ]

where row i of V is (1, a_i, ..., a_i^(alpha-1)) for a finite point and (0, ..., 0, 1) for infinity, and V_k
is V restricted to its first k columns with the infinity row replaced by e_(k-1). Correlation is the transpose
of that convolution (as a linear map of h), so

    A^T = V_m^T,    G = V_r,    B^T = V^{-T}.

V^{-1} needs no elimination: its columns are the Lagrange basis, L_i(x) = prod_{j != i}(x - a_j) / N_i with
N_i = prod_{j != i}(a_i - a_j) for a finite point, and prod_j (x - a_j) for infinity (zero at every finite
point, leading coefficient 1). Row i of B^T and row i of G may trade any nonzero factor without changing the
product; this module scales each row of B^T to coprime integers (so the input transform, applied to every tile,
is exact in floating point and cheap) and puts 1/N_i and that factor into G (applied once per filter, in
float64). A^T's entries are powers of the points, exact in binary for the points below.

Points. The default finite points are 0, 1, -1, 1/2, -1/2, 2, -2, 1/4, -1/4, ... (the first alpha - 1):
F(2,3) uses 0, +-1; F(4,3) uses 0, +-1, +-1/2; F(6,3) uses 0, +-1, +-1/2, +-2. Small points of magnitude
1 and reciprocal pairs (a, 1/a) keep the entries of A^T and B^T near 1: a large point a puts a^(m-1) into A^T
and big coefficients into B^T, and the transforms then cancel large terms in floating point. Every point is a
power of two (or 0), so A^T is exact in float32. Measured in float32 on C = 512 layers (normwise error): F(4,3)
with +-1/2 and with +-2 (Lavin & Gray's choice) are within each other's spread (1e-5 to 3e-5); F(6,3) with
+-1/2, +-2 is 0.6e-5 to 3e-5, while replacing +-1/2 by +-3 makes it 1.5e-3, 100 times worse.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from math import gcd, lcm

import numpy as np


def default_points(count: int) -> tuple[Fraction, ...]:
    """The first ``count`` finite points of 0, 1, -1, 1/2, -1/2, 2, -2, 1/4, -1/4, 4, -4, ..."""
    points = [Fraction(0)]
    magnitudes = [Fraction(1)]
    k = 1
    while len(points) < count:
        if not magnitudes:
            magnitudes = [Fraction(1, 2 ** k), Fraction(2 ** k)]
            k += 1
        a = magnitudes.pop(0)
        points += [a, -a]
    return tuple(points[:count])


def _poly_from_roots(roots) -> list[Fraction]:
    """Coefficients (lowest degree first) of the monic polynomial prod (x - root)."""
    coeffs = [Fraction(1)]
    for root in roots:
        shifted = [Fraction(0)] + coeffs                      # x * p(x)
        coeffs = [s - root * c for s, c in zip(shifted, coeffs + [Fraction(0)])]
    return coeffs


def _primitive_integer_scale(row) -> Fraction:
    """The positive factor that turns a rational row into coprime integers."""
    denominators = lcm(*(f.denominator for f in row))
    numerators = gcd(*(int(f * denominators) for f in row))
    return Fraction(denominators, numerators)


@dataclass(frozen=True)
class WinogradMatrices:
    """A^T (m x alpha), G (alpha x r), B^T (alpha x alpha) of F(m, r), as tuples of Fraction rows."""

    m: int
    r: int
    points: tuple[Fraction, ...]
    AT: tuple[tuple[Fraction, ...], ...]
    G: tuple[tuple[Fraction, ...], ...]
    BT: tuple[tuple[Fraction, ...], ...]

    @property
    def alpha(self) -> int:
        return self.m + self.r - 1

    def as_float(self, dtype=np.float64) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(A^T, G, B^T) as C-contiguous float arrays of ``dtype`` (each entry correctly rounded)."""
        return tuple(np.array([[float(f) for f in row] for row in mat], dtype=dtype)
                     for mat in (self.AT, self.G, self.BT))


def cook_toom(m: int, r: int, points=None) -> WinogradMatrices:
    """The matrices of F(m, r) from alpha - 1 = m + r - 2 distinct finite points (default: ``default_points``)
    plus the point at infinity."""
    if m < 1 or r < 1:
        raise ValueError(f"F(m, r) needs m, r >= 1, got F({m}, {r})")
    alpha = m + r - 1
    points = default_points(alpha - 1) if points is None else tuple(Fraction(a) for a in points)
    if len(points) != alpha - 1 or len(set(points)) != len(points):
        raise ValueError(f"F({m}, {r}) needs {alpha - 1} distinct finite points, got {points}")
    zero, one = Fraction(0), Fraction(1)

    def evaluation_row(a, k):                                  # (1, a, ..., a^(k-1)): a row of V_k
        return tuple(a ** e for e in range(k))

    infinity = lambda k: tuple(one if e == k - 1 else zero for e in range(k))  # noqa: E731
    AT_cols, G_rows, BT_rows = [], [], []
    for i, a in enumerate(points):
        others = points[:i] + points[i + 1:]
        lagrange = _poly_from_roots(others) + [zero]         # degree alpha - 2, padded to alpha coefficients
        n_i = Fraction(1)
        for b in others:
            n_i *= a - b
        scale = _primitive_integer_scale(lagrange) * (1 if n_i > 0 else -1)
        BT_rows.append(tuple(c * scale for c in lagrange))
        G_rows.append(tuple(v / (n_i * scale) for v in evaluation_row(a, r)))
        AT_cols.append(evaluation_row(a, m))
    vanishing = _poly_from_roots(points)                       # the point at infinity
    scale = _primitive_integer_scale(vanishing)
    BT_rows.append(tuple(c * scale for c in vanishing))
    G_rows.append(tuple(v / scale for v in infinity(r)))
    AT_cols.append(infinity(m))
    AT = tuple(tuple(col[i] for col in AT_cols) for i in range(m))
    return WinogradMatrices(m, r, points, AT, tuple(G_rows), tuple(BT_rows))


def identity_holds(mats: WinogradMatrices) -> bool:
    """Exactly (in Fractions) whether y = A^T [(G g) * (B^T d)] is the correlation y_i = sum_j d_{i+j} g_j.

    Both sides are bilinear in (d, g), so it suffices to compare them on every pair of basis vectors
    d = e_k, g = e_j: the left side is sum_l AT[i][l] G[l][j] BT[l][k], the right side is 1 if k == i + j."""
    m, r, alpha = mats.m, mats.r, mats.alpha
    for i in range(m):
        for j in range(r):
            for k in range(alpha):
                lhs = sum(mats.AT[i][l] * mats.G[l][j] * mats.BT[l][k] for l in range(alpha))
                if lhs != (1 if k == i + j else 0):
                    return False
    return True
