"""Winograd: the Cook-Toom matrices are exact, the multiply count drops, and the layer-level promises hold."""
from fractions import Fraction

import numpy as np
import pytest

import convalgos
from convalgos import ALGORITHMS, ConvParams, reference
from convalgos.cooktoom import cook_toom, default_points, identity_holds
from convalgos.reference import normwise_error
from convalgos.winograd import Winograd

NAMES = ["winograd_2x2", "winograd_4x4", "winograd_6x6"]


# ---- the generator -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("m, r", [(2, 3), (4, 3), (6, 3), (3, 2), (2, 5), (1, 1), (5, 4)])
def test_identity_holds_exactly(m, r):
    mats = cook_toom(m, r)
    assert len(mats.AT) == m and len(mats.AT[0]) == m + r - 1
    assert len(mats.G) == m + r - 1 and len(mats.G[0]) == r
    assert len(mats.BT) == m + r - 1 and len(mats.BT[0]) == m + r - 1
    assert identity_holds(mats)


def test_identity_check_can_fail():
    mats = cook_toom(4, 3)
    G = list(mats.G)
    G[2] = tuple(v * Fraction(11, 10) for v in G[2])
    assert not identity_holds(type(mats)(mats.m, mats.r, mats.points, mats.AT, tuple(G), mats.BT))


def test_documented_points_and_integer_input_transform():
    assert cook_toom(2, 3).points == (0, 1, -1)
    assert cook_toom(4, 3).points == (0, 1, -1, Fraction(1, 2), Fraction(-1, 2))
    assert set(cook_toom(6, 3).points) == {0, 1, -1, 2, -2, Fraction(1, 2), Fraction(-1, 2)}
    assert default_points(1) == (0,)
    for m in (2, 4, 6):
        assert all(v.denominator == 1 for row in cook_toom(m, 3).BT for v in row)
    assert identity_holds(cook_toom(4, 3, points=[0, 1, -1, 2, -2]))     # Lavin & Gray's points
    with pytest.raises(ValueError):
        cook_toom(4, 3, points=[0, 1, 1, 2, -2])


@pytest.mark.parametrize("m", [2, 4, 6])
def test_two_dimensional_form_exact(m):
    """Y = A^T [(G g G^T) * (B^T d B)] A is the 2-D correlation, in Fractions on random integer data."""
    mats = cook_toom(m, 3)
    rng = np.random.default_rng(m)
    d = np.array(rng.integers(-9, 10, (m + 2, m + 2)), dtype=object)
    g = np.array(rng.integers(-9, 10, (3, 3)), dtype=object)
    AT, G, BT = (np.array(mat, dtype=object) for mat in (mats.AT, mats.G, mats.BT))
    Y = AT.dot((G.dot(g).dot(G.T)) * (BT.dot(d).dot(BT.T))).dot(AT.T)
    direct = np.array([[sum(d[i + u, j + v] * g[u, v] for u in range(3) for v in range(3)) for j in range(m)]
                       for i in range(m)], dtype=object)
    assert (Y == direct).all()


@pytest.mark.parametrize("m, r", [(2, 3), (4, 3), (6, 3), (3, 2), (2, 5)])
def test_multiplies_per_tile(m, r):
    """The elementwise product has (m + r - 1)^2 entries per m x m tile, against m^2 r^2 directly."""
    mats = cook_toom(m, r)
    alpha = len(mats.G)
    assert alpha ** 2 == (m + r - 1) ** 2 < m * m * r * r


@pytest.mark.parametrize("name", NAMES)
def test_algorithm_multiplies_and_flops_drop(name):
    algo = ALGORITHMS[name]
    assert algo.elementwise_multiplies_per_tile == (algo.m + 2) ** 2 < algo.m ** 2 * 9
    p = ConvParams.from_shapes((1, 256, 56, 56), (256, 256, 3, 3), padding=1)
    tiles = (56 // algo.m + (56 % algo.m > 0)) ** 2
    gemm = 2 * algo.alpha ** 2 * 256 * 256 * tiles
    assert gemm < algo.flops(p) < 1.2 * gemm          # the transforms are a small extra on a deep layer
    assert algo.flops(p) < p.flops


# ---- the algorithm -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_supports_reasons(name):
    algo = ALGORITHMS[name]
    p = ConvParams.from_shapes((1, 4, 9, 9), (4, 4, 5, 5), padding=2)
    assert algo.supports(p).reason == f"{name} needs a 3x3 kernel, got 5x5"
    p = ConvParams.from_shapes((1, 4, 9, 9), (4, 4, 3, 3), stride=2)
    assert algo.supports(p).reason == f"{name} needs stride 1, got (2, 2)"
    p = ConvParams.from_shapes((1, 4, 9, 9), (4, 4, 3, 3), dilation=(1, 2))
    assert algo.supports(p).reason == f"{name} needs dilation 1, got (1, 2)"
    p = ConvParams.from_shapes((1, 4, 9, 9), (6, 2, 3, 3), padding=((0, 2), (1, 0)), groups=2)
    assert algo.supports(p)
    with pytest.raises(convalgos.UnsupportedError, match="needs a 3x3 kernel, got 1x3"):
        convalgos.conv2d(np.zeros((1, 4, 9, 9), np.float32), np.zeros((4, 4, 1, 3), np.float32), algo=name)


def _run(algo, p, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((p.N, p.C, p.H, p.W)).astype(p.dtype)
    w = rng.standard_normal((p.K, p.Cg, p.R, p.S)).astype(p.dtype)
    out = np.empty(p.out_shape, p.dtype)
    algo.forward(x, w, p, out)
    return out, reference.forward(x, w, p)


@pytest.mark.parametrize("m", [2, 4, 6])
def test_workspace_formula_and_chunking(m):
    """workspace_bytes is what forward allocates, also when the tiles are cut into several chunks, and the
    chunked result agrees with the reference (tile rows crossing images, edge tiles, asymmetric padding)."""
    algo = Winograd(m, {})
    p = ConvParams.from_shapes((3, 6, 13, 11), (8, 3, 3, 3), padding=((2, 0), (1, 2)), groups=2)
    for chunk_bytes in (1 << 30, 4096):
        algo.chunk_bytes = chunk_bytes
        algo.release()
        out, ref = _run(algo, p)
        assert algo.workspace.nbytes == algo.workspace_bytes(p)
        assert normwise_error(out, ref) < 1e-5
    assert algo._rows_per_chunk(p) < p.N * -(-p.out_hw[0] // m)       # the small budget did chunk


def test_error_grows_with_tile_size_on_a_deep_layer():
    p = ConvParams.from_shapes((1, 512, 12, 12), (16, 512, 3, 3), padding=1)
    errors = {name: normwise_error(*_run(ALGORITHMS[name], p)) for name in NAMES}
    for name, err in errors.items():
        assert err <= ALGORITHMS[name].tolerance["float32"] / 3
    assert 5 * errors["winograd_2x2"] < min(errors["winograd_4x4"], errors["winograd_6x6"])
    # and badly chosen points are far worse: +-3 instead of +-1/2 in F(6, 3)
    bad = Winograd(6, {})
    bad.matrices = cook_toom(6, 3, points=[0, 1, -1, 2, -2, 3, -3])
    bad._float_matrices = {np.dtype(dt): bad.matrices.as_float(dt) for dt in (np.float32, np.float64)}
    assert normwise_error(*_run(bad, p)) > 10 * errors["winograd_6x6"]


@pytest.mark.parametrize("name", NAMES)
def test_float64_is_tight(name):
    p = ConvParams.from_shapes((2, 32, 15, 10), (8, 32, 3, 3), padding=1, dtype="float64")
    assert normwise_error(*_run(ALGORITHMS[name], p)) < ALGORITHMS[name].tolerance["float64"] / 10


def test_depthwise_runs():
    p = ConvParams.from_shapes((1, 8, 10, 10), (16, 1, 3, 3), padding=1, groups=8)
    out, ref = _run(ALGORITHMS["winograd_4x4"], p)
    assert normwise_error(out, ref) < 1e-5
