"""F(4x4, 3x3)'s transforms written out: cook_toom(4, 3)'s B^T, A^T and G (points 0, +-1, +-1/2) factored into
sums shared between rows, on whole vectors (the lanes: channels, in ``fused_kernels``).

A row of B^T d (six inputs d0..d5, six outputs), from the matrix's rows [1 0 -5 0 4 0], [0 -1 -1 4 4 0],
[0 1 -1 -4 4 0], [0 1 2 -1 -2 0], [0 -1 2 1 -2 0], [0 1 0 -5 0 4]:

    r0 = d0 - 5 d2 + 4 d4               r3 = (d1 - d3) + 2 (d2 - d4)
    r1 = 4 (d3 + d4) - (d1 + d2)        r4 = 2 (d2 - d4) - (d1 - d3)
    r2 = 4 (d4 - d3) + (d1 - d2)        r5 = d1 - 5 d3 + 4 d5

14 operations where the dense matrix takes 36 multiply-adds (and 36 broadcasts of its entries). A row of A^T m,
from [1 1 1 1 1 0], [0 1 -1 1/2 -1/2 0], [0 1 1 1/4 1/4 0], [0 1 -1 1/8 -1/8 1]: with s = m1 + m2, d = m1 - m2,
S = m3 + m4, D = m3 - m4: y0 = m0 + s + S, y1 = d + D/2, y2 = s + S/4, y3 = d + D/8 + m5 (10 operations). The
constants are exact in binary. G's rows [1 0 0], [1/6 1/6 1/6], [1/6 -1/6 1/6], [4/3 2/3 1/3], [4/3 -2/3 1/3],
[0 0 1/4] on (g0, g1, g2), with t = g0 + g2 and u = (4 g0 + g2) / 3: g0, (t + g1)/6, (t - g1)/6, u + 2/3 g1,
u - 2/3 g1, g2/4 (13 operations). Backward-filter's F(3x3, 4x4) (convalgos.winograd) has the same B^T, and for dy's
4 x 4 tiles G' with rows [1 0 0 0], [1/6 1/6 1/6 1/6], [1/6 -1/6 1/6 -1/6], [4/3 2/3 1/3 1/6], [4/3 -2/3 1/3 -1/6],
[0 0 0 1/4]: with e = d0 + d2, o = d1 + d3, E = (4 d0 + d2)/3, O = (4 d1 + d3)/6: d0, (e + o)/6, (e - o)/6, E + O,
E - O, d3/4 (15 operations). The order of the sums differs from the matrix products', so the rounding does
(tests/test_winograd_fused.py checks each row against cook_toom's matrices).

A tile is transformed in two passes: X d X^T = X (X d^T)^T. The first pass transforms the rows of d into a
scratch T, the second the columns of T, so no more than a row's vectors are live. The four ``*_tile``
functions are near-copies on purpose: each row function takes and returns its vectors as values (registers),
so their count (6, 4 or 3 in; 6 or 4 out) is written out in each.
"""
from __future__ import annotations

from numba import njit

from ..kernels.simd import add, lanes, load, mul_add, mul_sub, scale, store, sub

#: FLOPs of one tile's transform per channel (a multiply-add counts 2): 12 rows of 22 in, 10 rows of 13 out;
#: of one filter's, 9 rows of 13; of one tile of dy's (backward-filter's G'), 10 rows of 15.
INPUT_FLOPS, OUTPUT_FLOPS, FILTER_FLOPS, GRADIENT_FLOPS = 12 * 22, 10 * 13, 9 * 13, 10 * 15


@njit(cache=True, inline="always")
def input_row(d0, d1, d2, d3, d4, d5):
    """B^T applied to six vectors: (r0, ..., r5) of the module docstring."""
    s, p, q, u = add(d3, d4), add(d1, d2), sub(d4, d3), sub(d1, d2)
    c, e = sub(d1, d3), sub(d2, d4)
    return (mul_add(4.0, d4, mul_add(-5.0, d2, d0)), mul_sub(4.0, s, p), mul_add(4.0, q, u),
            mul_add(2.0, e, c), mul_sub(2.0, e, c), mul_add(4.0, d5, mul_add(-5.0, d3, d1)))


@njit(cache=True, inline="always")
def output_row(m0, m1, m2, m3, m4, m5):
    """A^T applied to six vectors: (y0, y1, y2, y3) of the module docstring."""
    s, d, S, D = add(m1, m2), sub(m1, m2), add(m3, m4), sub(m3, m4)
    return add(add(m0, s), S), mul_add(0.5, D, d), mul_add(0.25, S, s), add(mul_add(0.125, D, d), m5)


@njit(cache=True, inline="always")
def filter_row(g0, g1, g2):
    """G applied to three vectors: six, as in the module docstring."""
    t, u = add(g0, g2), scale(1.0 / 3.0, mul_add(4.0, g0, g2))
    return (g0, scale(1.0 / 6.0, add(t, g1)), scale(1.0 / 6.0, sub(t, g1)), mul_add(2.0 / 3.0, g1, u),
            mul_add(-2.0 / 3.0, g1, u), scale(0.25, g2))


@njit(cache=True, inline="always")
def gradient_row(d0, d1, d2, d3):
    """Backward-filter's G' applied to four vectors: six, as in the module docstring."""
    e, o = add(d0, d2), add(d1, d3)
    E, O = scale(1.0 / 3.0, mul_add(4.0, d0, d2)), scale(1.0 / 6.0, mul_add(4.0, d1, d3))
    return d0, scale(1.0 / 6.0, add(e, o)), scale(1.0 / 6.0, sub(e, o)), add(E, O), sub(E, O), scale(0.25, d3)


@njit(cache=True, inline="always")
def input_tile(src, at, row, col, T, V, v0, step):
    """V[v0 + xi*step :][:L] = (B^T d B)[xi] (xi = 6 i + j) for the 6 x 6 tile of vectors d[k][l] = src[at + k*row
    + l*col :][:L]. T: scratch of 36 L elements."""
    L = lanes(T)
    for k in range(6):
        q = at + k * row
        e = input_row(load(src, q), load(src, q + col), load(src, q + 2 * col), load(src, q + 3 * col),
                      load(src, q + 4 * col), load(src, q + 5 * col))
        for j in range(6):                                # (d B) row k: T[k, j]
            store(T, (6 * k + j) * L, e[j])
    for j in range(6):
        r = input_row(load(T, j * L), load(T, (6 + j) * L), load(T, (12 + j) * L), load(T, (18 + j) * L),
                      load(T, (24 + j) * L), load(T, (30 + j) * L))
        for i in range(6):
            store(V, v0 + (6 * i + j) * step, r[i])


@njit(cache=True, inline="always")
def output_tile(M, m0, step, T, Y):
    """Y[(4 i + j) L :][:L] = (A^T m A)[i, j] for the 6 x 6 tile of vectors m[xi] = M[m0 + xi*step :][:L]. T:
    scratch of 24 L elements."""
    L = lanes(T)
    for k in range(6):
        q = m0 + 6 * k * step
        e = output_row(load(M, q), load(M, q + step), load(M, q + 2 * step), load(M, q + 3 * step),
                       load(M, q + 4 * step), load(M, q + 5 * step))
        for j in range(4):                                # (m A) row k: T[k, j]
            store(T, (4 * k + j) * L, e[j])
    for j in range(4):
        y = output_row(load(T, j * L), load(T, (4 + j) * L), load(T, (8 + j) * L), load(T, (12 + j) * L),
                       load(T, (16 + j) * L), load(T, (20 + j) * L))
        for i in range(4):
            store(Y, (4 * i + j) * L, y[i])


@njit(cache=True, inline="always")
def filter_tile(src, pitch, T, U, u0, step):
    """U[u0 + xi*step :][:L] = (G f G^T)[xi] (xi = 6 i + j) for the 3 x 3 filter of vectors f[r][s] = src[(3 r + s)
    pitch :][:L]. T: scratch of 18 L elements."""
    L = lanes(T)
    for r in range(3):
        e = filter_row(load(src, 3 * r * pitch), load(src, (3 * r + 1) * pitch), load(src, (3 * r + 2) * pitch))
        for j in range(6):                                # (f G^T) row r: T[r, j]
            store(T, (6 * r + j) * L, e[j])
    for j in range(6):
        u = filter_row(load(T, j * L), load(T, (6 + j) * L), load(T, (12 + j) * L))
        for i in range(6):
            store(U, u0 + (6 * i + j) * step, u[i])


@njit(cache=True, inline="always")
def gradient_tile(src, at, row, col, T, D, d0, step):
    """D[d0 + xi*step :][:L] = (G' d G'^T)[xi] (xi = 6 i + j) for the 4 x 4 tile of vectors d[k][l] = src[at + k*row
    + l*col :][:L] (backward-filter's tiles of dy). T: scratch of 24 L elements."""
    L = lanes(T)
    for k in range(4):
        q = at + k * row
        e = gradient_row(load(src, q), load(src, q + col), load(src, q + 2 * col), load(src, q + 3 * col))
        for j in range(6):                                # (d G'^T) row k: T[k, j]
            store(T, (6 * k + j) * L, e[j])
    for j in range(6):
        r = gradient_row(load(T, j * L), load(T, (6 + j) * L), load(T, (12 + j) * L), load(T, (18 + j) * L))
        for i in range(6):
            store(D, d0 + (6 * i + j) * step, r[i])
