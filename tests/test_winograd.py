"""Winograd: the Cook-Toom matrices are exact, the multiply count drops in every pass, and the layer-level
promises (agreement with the reference, identities between the passes, reasons, workspace, FLOPs) hold."""
from fractions import Fraction

import numba
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import convalgos
import convalgos.winograd.cpu
import convalgos.winograd.kernels
from convalgos import ALGORITHMS, ConvParams, reference
from convalgos.winograd.cooktoom import cook_toom, default_points, identity_holds
from convalgos.reference import normwise_error
from convalgos.winograd.blocking import n_chunks
from convalgos.winograd.cpu import Winograd
from layers import layers

NAMES = ["winograd_2x2", "winograd_4x4", "winograd_6x6"]
BACKWARD = ["backward_data", "backward_filter"]


# ---- the generator -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("m, r", [(2, 3), (4, 3), (6, 3), (3, 2), (3, 4), (3, 6), (2, 5), (1, 1), (5, 4)])
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
        assert cook_toom(3, m).BT == cook_toom(m, 3).BT          # backward-filter's B^T: the same points
    assert identity_holds(cook_toom(4, 3, points=[0, 1, -1, 2, -2]))     # Lavin & Gray's points
    with pytest.raises(ValueError):
        cook_toom(4, 3, points=[0, 1, 1, 2, -2])


@pytest.mark.parametrize("m, r", [(2, 3), (4, 3), (6, 3), (3, 2), (3, 4), (3, 6)])
def test_two_dimensional_form_exact(m, r):
    """Y = A^T [(G g G^T) * (B^T d B)] A is the 2-D correlation, in Fractions on random integer data: F(m x m,
    3 x 3) of the forward pass and F(3 x 3, m x m) of backward-filter (g an m x m tile of dy)."""
    mats = cook_toom(m, r)
    rng = np.random.default_rng(m * 10 + r)
    d = np.array(rng.integers(-9, 10, (m + r - 1, m + r - 1)), dtype=object)
    g = np.array(rng.integers(-9, 10, (r, r)), dtype=object)
    AT, G, BT = (np.array(mat, dtype=object) for mat in (mats.AT, mats.G, mats.BT))
    Y = AT.dot((G.dot(g).dot(G.T)) * (BT.dot(d).dot(BT.T))).dot(AT.T)
    direct = np.array([[sum(d[i + u, j + v] * g[u, v] for u in range(r) for v in range(r)) for j in range(m)]
                       for i in range(m)], dtype=object)
    assert (Y == direct).all()


# ---- multiplies and FLOPs ----------------------------------------------------------------------------------
class CountingNumpy:
    """NumPy, except that matmul counts the multiplies it does (stands in for winograd's ``np``); so does
    ``outer_products``, the depthwise layers' products (stands in for winograd's kernel of that name)."""

    def __init__(self):
        self.multiplies = 0

    def __getattr__(self, name):
        return getattr(np, name)

    def matmul(self, a, b, out):
        self.multiplies += out.size * a.shape[-1]
        return np.matmul(a, b, out=out)

    def outer_products(self, U, V, M):
        self.multiplies += M.size
        return convalgos.winograd.kernels.outer_products(U, V, M)


def operands(p, op, seed=0):
    rng = np.random.default_rng(seed)
    dt = p.compute_dtype
    x = rng.standard_normal(p.in_shape).astype(dt)
    w = rng.standard_normal(p.weight_shape).astype(dt)
    dy = rng.standard_normal(p.out_shape).astype(dt)
    return {"forward": (x, w), "backward_data": (dy, w), "backward_filter": (x, dy)}[op]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("op", convalgos.PASSES)
@pytest.mark.parametrize("shape, groups", [(((2, 6, 12, 12), (4, 6, 3, 3)), 1), (((1, 4, 13, 7), (6, 2, 3, 3)), 2),
                                           (((2, 3, 9, 10), (6, 1, 3, 3)), 3), (((1, 4, 8, 8), (4, 1, 3, 3)), 4)])
def test_multiplies_are_counted_as_done_and_drop_against_direct(name, op, shape, groups, monkeypatch):
    """The products the pass really performs are ``gemm_multiplies``: alpha^2 per m x m tile per (k, c) pair,
    (m + 2)^2 / (9 m^2) of direct's p.flops / 2 when the tiles fit exactly, and fewer than direct's anyway."""
    algo = ALGORITHMS[name]
    p = ConvParams.from_shapes(*shape, padding=1, groups=groups)
    counting = CountingNumpy()
    monkeypatch.setattr(convalgos.winograd.cpu, "np", counting)
    monkeypatch.setattr(convalgos.winograd.cpu, "outer_products", counting.outer_products)
    monkeypatch.setattr(convalgos.winograd.cpu, "matmul", counting.matmul)
    algo.release()
    getattr(algo, op)(*operands(p, op), p, np.empty(p.result_shape(op), np.float32))
    tiled = (p.H, p.W) if op == "backward_data" else p.out_hw           # dx's tiles, else y's (dy's)
    tiles = p.N * -(-tiled[0] // algo.m) * -(-tiled[1] // algo.m)
    assert counting.multiplies == algo.gemm_multiplies(p, op) == (
        algo.elementwise_multiplies_per_tile * p.K * p.Cg * tiles)
    tiles_exact = all(size % algo.m == 0 for size in (p.H, p.W))     # padding 1: Ho, Wo = H, W
    if tiles_exact:
        assert algo.gemm_multiplies(p, op) * 9 * algo.m ** 2 == (algo.m + 2) ** 2 * p.flops // 2
    if algo.m > 2 or tiles_exact:
        assert algo.gemm_multiplies(p, op) < p.flops // 2


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("op", convalgos.PASSES)
def test_flops_drop_on_a_deep_layer_and_are_mostly_the_gemms(name, op):
    algo = ALGORITHMS[name]
    p = ConvParams.from_shapes((1, 256, 56, 56), (256, 256, 3, 3), padding=1)
    gemm = 2 * algo.gemm_multiplies(p, op)
    assert gemm < algo.flops(p, op) < 1.2 * gemm          # the transforms are a small extra on a deep layer
    assert algo.flops(p, op) < p.flops


def test_backward_filter_flops_count_the_chunk_sums():
    algo = Winograd(4, ALGORITHMS["winograd_4x4"].tolerances)
    p = ConvParams.from_shapes((4, 8, 16, 16), (8, 8, 3, 3), padding=1)
    one_chunk = algo.flops(p, "backward_filter")
    algo.chunk_bytes = 1
    assert algo.flops(p, "backward_filter") - one_chunk == (4 * 4 - 1) * 36 * 8 * 8   # 16 tile rows, 1 per chunk


# ---- constraints -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("op", convalgos.PASSES)
def test_supports_reasons_name_the_parameter(name, op):
    algo = ALGORITHMS[name]
    p = ConvParams.from_shapes((1, 4, 9, 9), (4, 4, 5, 5), padding=2)
    assert algo.supports(p, op).reason == f"{name} needs a 3x3 kernel, got 5x5"
    p = ConvParams.from_shapes((1, 4, 9, 9), (4, 4, 3, 3), stride=2)
    assert algo.supports(p, op).reason == f"{name} needs stride 1, got (2, 2)"
    p = ConvParams.from_shapes((1, 4, 9, 9), (4, 4, 3, 3), dilation=2)
    assert algo.supports(p, op).reason == f"{name} needs dilation 1, got (2, 2)"
    p = ConvParams.from_shapes((1, 4, 9, 9), (6, 2, 3, 3), padding=((0, 5), (3, 0)), groups=2)
    assert algo.supports(p, op) and algo.implements(op)


def test_unsupported_backward_layers_raise_with_the_reason():
    x, dy = np.zeros((1, 4, 9, 9), np.float32), np.zeros((1, 4, 5, 5), np.float32)
    with pytest.raises(convalgos.UnsupportedError, match="backward_data.*needs a 3x3 kernel, got 5x5"):
        convalgos.conv2d_input(x.shape, np.zeros((4, 4, 5, 5), np.float32), dy, algo="winograd_2x2")
    with pytest.raises(convalgos.UnsupportedError, match="backward_filter.*needs stride 1, got \\(2, 2\\)"):
        convalgos.conv2d_weight(x, (4, 4, 3, 3), np.zeros((1, 4, 4, 4), np.float32), stride=2, algo="winograd_4x4")


# ---- agreement with the reference --------------------------------------------------------------------------
def gradient(name, op, layer, dtype, seed=0):
    """(the algorithm's gradient, the float64 reference's) for pass ``op`` of a layer dict, public API."""
    p = ConvParams.from_shapes(layer["x_shape"], layer["w_shape"], padding=layer["padding"],
                               groups=layer["groups"], dtype=dtype)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(p.in_shape).astype(dtype)
    w = rng.standard_normal(p.weight_shape).astype(dtype)
    dy = rng.standard_normal(p.out_shape).astype(dtype)
    kw = dict(padding=layer["padding"], groups=layer["groups"], algo=name)
    if op == "backward_data":
        return convalgos.conv2d_input(x.shape, w, dy, **kw), reference.backward_data(dy, w, p)
    return convalgos.conv2d_weight(x, w.shape, dy, **kw), reference.backward_filter(x, dy, p)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("op", BACKWARD)
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layer=layers(kernel=(3, 3), stride=(1, 1), dilation=(1, 1)))
def test_backward_passes_on_random_3x3_layers(name, op, dtype, layer):
    """Asymmetric padding, groups, depthwise, N = 0 and odd sizes that leave partial tiles."""
    got, ref = gradient(name, op, layer, dtype)
    assert got.dtype == np.dtype(dtype) and got.shape == ref.shape
    assert normwise_error(got, ref) <= ALGORITHMS[name].tolerance_of(op, dtype)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("op", BACKWARD)
@pytest.mark.parametrize("padding", ["same", ((3, 0), (4, 1)), ((0, 5), (2, 3)), 0])
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_backward_passes_with_same_and_cropping_padding(name, op, padding, dtype):
    """Padding above 2 crops dy in backward-data (rows and columns of dx that no output reads get zero)."""
    layer = dict(x_shape=(2, 6, 11, 9), w_shape=(4, 3, 3, 3), padding=padding, groups=2)
    got, ref = gradient(name, op, layer, dtype)
    assert got.dtype == np.dtype(dtype)
    assert normwise_error(got, ref) <= ALGORITHMS[name].tolerance_of(op, dtype)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("op", convalgos.PASSES)
def test_float64_is_tight(name, op):
    p = ConvParams.from_shapes((2, 32, 15, 10), (8, 32, 3, 3), padding=1, dtype="float64")
    a, b = operands(p, op)
    error = normwise_error(convalgos.run(ALGORITHMS[name], op, a, b, p), reference.PASS[op](a, b, p))
    assert error < ALGORITHMS[name].tolerance_of(op, "float64") / 10


@pytest.mark.parametrize("name", NAMES)
def test_the_identities_between_the_passes(name):
    """Backward-data at stride 1 is the forward conv of dy (padded by 2 - padding) with the flipped filter, K
    and C swapped per group; backward-filter is the forward conv of x (N and C swapped) with dy as the kernel."""
    (t, b), (l, r) = padding = ((2, 0), (1, 2))
    groups, Kg, Cg = 2, 3, 2
    p = ConvParams.from_shapes((3, Cg * groups, 10, 7), (Kg * groups, Cg, 3, 3), padding=padding, groups=groups)
    x, w = operands(p, "forward")
    dy = operands(p, "backward_data")[0]
    flipped = w.reshape(groups, Kg, Cg, 3, 3).transpose(0, 2, 1, 3, 4).reshape(p.C, Kg, 3, 3)[:, :, ::-1, ::-1]
    dx = reference.conv2d(dy, flipped, padding=((2 - t, 2 - b), (2 - l, 2 - r)), groups=groups)
    tol = ALGORITHMS[name].tolerance_of("backward_data", "float32")
    assert normwise_error(convalgos.run(ALGORITHMS[name], "backward_data", dy, w, p), dx) <= tol
    for g in range(groups):                               # one group at a time: channels of x become the batch
        xs, dys = x[:, g * Cg:(g + 1) * Cg], dy[:, g * Kg:(g + 1) * Kg]
        dw_g = reference.conv2d(xs.transpose(1, 0, 2, 3), dys.transpose(1, 0, 2, 3), padding=padding)
        got = convalgos.run(ALGORITHMS[name], "backward_filter", x, dy, p)[g * Kg:(g + 1) * Kg]
        assert normwise_error(got, dw_g.transpose(1, 0, 2, 3)) <= ALGORITHMS[name].tolerance_of(
            "backward_filter", "float32")


# ---- workspace, chunks and accuracy ------------------------------------------------------------------------
@pytest.mark.parametrize("m", [2, 4, 6])
@pytest.mark.parametrize("op", convalgos.PASSES)
@pytest.mark.parametrize("hw, padding", [((13, 11), ((2, 0), (1, 2))), ((12, 12), 1)])
def test_workspace_formula_and_chunking(m, op, hw, padding):
    """workspace_bytes is what the pass allocates, also when its tiles are cut into several chunks, and the
    chunked result agrees with the reference (tile rows crossing images, edge tiles, asymmetric padding). With
    12 x 12 outputs the tiles fit exactly, and backward-filter reads dy in place (no padded copy)."""
    algo = Winograd(m, ALGORITHMS[f"winograd_{m}x{m}"].tolerances)
    p = ConvParams.from_shapes((3, 6) + hw, (8, 3, 3, 3), padding=padding, groups=2)
    a, b = operands(p, op)
    for chunk_bytes in (1 << 30, 4096):
        algo.chunk_bytes = chunk_bytes
        algo.release()
        out = np.empty(p.result_shape(op), np.float32)
        getattr(algo, op)(a, b, p, out)
        assert algo.workspace.nbytes == algo.workspace_bytes(p, op)
        assert normwise_error(out, reference.PASS[op](a, b, p)) <= algo.tolerance_of(op, "float32")
    assert n_chunks(algo, p, op) > 1                                   # the small budget did chunk


@pytest.mark.parametrize("name", NAMES + ["winograd_fused_4x4"])
@pytest.mark.parametrize("op", convalgos.PASSES)
def test_per_thread_scratch_is_counted_and_sized_by_the_layer(name, op):
    """The transform kernels' scratch is one kept row per thread, counted in workspace_bytes at every thread
    count, and sized by the work: on a one-filter 3x3 layer a few KiB per thread (a 1024-filter block was
    258 KB for winograd_4x4; the fused forward and backward-data keep a block of 8 tiles x a vector of channels
    in each of their 36 rows, under 64 KiB). The fused backward-filter keeps a block's transforms with the channels
    padded to a register tile (under 256 KiB), on one thread only when the layer has one block of tiles."""
    algo = ALGORITHMS[name]
    if not algo.implements(op):
        pytest.skip(f"{name} has no {op} pass")
    p = ConvParams.from_shapes((1, 1, 3, 3), (1, 1, 3, 3))
    a, b = operands(p, op)
    threads = numba.get_num_threads()
    declared = {}
    try:
        for n_threads in sorted({1, threads}):
            numba.set_num_threads(n_threads)
            algo.release()
            getattr(algo, op)(a, b, p, np.empty(p.result_shape(op), np.float32))
            declared[n_threads] = algo.workspace_bytes(p, op)
            assert algo.workspace.nbytes == declared[n_threads]
    finally:
        numba.set_num_threads(threads)
        algo.release()
    per_thread = 64 << 10 if name == "winograd_fused_4x4" and op != "backward_filter" else 24 << 10
    assert declared[threads] - declared[1] <= (threads - 1) * per_thread
    assert declared[1] < (256 << 10 if (name, op) == ("winograd_fused_4x4", "backward_filter") else per_thread)


def test_error_grows_with_tile_size_on_a_deep_layer():
    p = ConvParams.from_shapes((1, 512, 12, 12), (16, 512, 3, 3), padding=1)
    for op in convalgos.PASSES:
        a, b = operands(p, op)
        ref = reference.PASS[op](a, b, p)
        errors = {name: normwise_error(convalgos.run(ALGORITHMS[name], op, a, b, p), ref) for name in NAMES}
        for name, err in errors.items():
            assert err <= ALGORITHMS[name].tolerance_of(op, "float32") / 3
        assert 5 * errors["winograd_2x2"] < min(errors["winograd_4x4"], errors["winograd_6x6"])
        # and badly chosen points are far worse: +-3 instead of +-1/2 in F(6, 3) and F(3, 6)
        bad = Winograd(6, ALGORITHMS["winograd_6x6"].tolerances, points=[0, 1, -1, 2, -2, 3, -3])
        assert normwise_error(convalgos.run(bad, op, a, b, p), ref) > 10 * errors["winograd_6x6"]
