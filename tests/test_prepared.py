"""Prepared weights: a pass run with ``algorithm.prepare(w, p, op)`` gives bitwise the result of the same pass
without it (the form is made by the very code the pass runs first, on the same operands), never reads the
weight, is refused for another algorithm, pass or layer, and algorithms with nothing to prepare return None."""
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import convalgos
from convalgos import ALGORITHMS, PASSES, ConvParams, UnsupportedError, reference, run
from convalgos.reference import normwise_error
from layers import layers, make_arrays, params_of

PREPARING = ["direct_channels", "winograd_2x2", "winograd_4x4", "winograd_6x6", "winograd_fused_4x4", "fft",
             "fft_tiled"]
WEIGHT_PASSES = ["forward", "backward_data"]
SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def first_operand(p: ConvParams, op: str, dtype, seed: int = 1):
    """x for forward, dy for backward_data."""
    shape = p.in_shape if op == "forward" else p.out_shape
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def supported_layer(draw, name: str, op: str):
    kernel = (3, 3) if name.startswith("winograd") else None
    one = (1, 1) if name.startswith("winograd") else None
    layer = draw(layers(max_hw=10, max_channels=5, kernel=kernel, stride=one, dilation=one))
    p = params_of(layer, draw(st.sampled_from(["float32", "float64", "float16"])))
    assume(ALGORITHMS[name].supports(p, op))          # direct_channels' backward_data: stride 1, padding in reach
    return layer, p


@pytest.mark.parametrize("op", WEIGHT_PASSES)
@pytest.mark.parametrize("name", PREPARING)
@SETTINGS
@given(data=st.data())
def test_prepared_pass_is_bitwise_the_unprepared_one(name, op, data):
    algorithm = ALGORITHMS[name]
    layer, p = supported_layer(data.draw, name, op)
    _, w, _ = make_arrays(layer, p.dtype)
    a = first_operand(p, op, p.dtype)
    prepared = algorithm.prepare(w, p, op)
    assert prepared.nbytes == algorithm.prepare_bytes(p, op) > 0
    assert prepared.fits(algorithm, p, op)
    plain = run(algorithm, op, a, w, p)
    with_weight = run(algorithm, op, a, w, p, prepared=prepared)
    without_weight = run(algorithm, op, a, None, p, prepared=prepared)      # the prepared pass never reads w
    np.testing.assert_array_equal(with_weight, plain)
    np.testing.assert_array_equal(without_weight, plain)
    if p.N:
        ref = reference.PASS[op](a, w, p)
        assert normwise_error(without_weight, ref) <= algorithm.tolerance_of(op, p.dtype)


@pytest.mark.parametrize("name", PREPARING)
def test_prepared_form_outlives_later_calls(name):
    """The form is an array of its own: unprepared calls with other weights (same layer) do not overwrite it."""
    algorithm = ALGORITHMS[name]
    p = ConvParams.from_shapes((2, 4, 9, 9), (6, 4, 3, 3), padding=1)
    rng = np.random.default_rng(3)
    w, other = (rng.standard_normal(p.weight_shape).astype(np.float32) for _ in range(2))
    for op in WEIGHT_PASSES:
        a = first_operand(p, op, np.float32)
        prepared = algorithm.prepare(w, p, op)
        expected = run(algorithm, op, a, w, p)
        run(algorithm, op, a, other, p)
        np.testing.assert_array_equal(run(algorithm, op, a, None, p, prepared=prepared), expected)
        with pytest.raises(ValueError, match="read-only"):
            prepared.data[...] = 0


@pytest.mark.parametrize("name", PREPARING)
def test_prepared_path_with_padding_and_groups(name):
    """A fixed layer with asymmetric padding and groups, both passes, against the reference."""
    algorithm = ALGORITHMS[name]
    p = ConvParams.from_shapes((3, 6, 11, 8), (9, 2, 3, 3), padding=((0, 2), (1, 0)), groups=3,
                               dtype="float64")
    w = np.random.default_rng(4).standard_normal(p.weight_shape)
    for op in WEIGHT_PASSES:
        a = first_operand(p, op, np.float64)
        got = run(algorithm, op, a, None, p, prepared=algorithm.prepare(w, p, op))
        assert normwise_error(got, reference.PASS[op](a, w, p)) <= algorithm.tolerance_of(op, "float64")


# ---- refusals ------------------------------------------------------------------------------------------------
P = ConvParams.from_shapes((2, 4, 12, 12), (6, 4, 3, 3), padding=1)
W = np.random.default_rng(5).standard_normal(P.weight_shape).astype(np.float32)


def refuses(prepared, algorithm, p, op):
    assert not prepared.fits(algorithm, p, op)
    a = first_operand(p, op, np.float32)
    with pytest.raises(ValueError, match="prepared was made for another algorithm, pass or layer"):
        run(algorithm, op, a, W, p, prepared=prepared)


@pytest.mark.parametrize("name", PREPARING)
def test_refuses_another_pass(name):
    algorithm = ALGORITHMS[name]
    refuses(algorithm.prepare(W, P, "forward"), algorithm, P, "backward_data")
    refuses(algorithm.prepare(W, P, "backward_data"), algorithm, P, "forward")


@pytest.mark.parametrize("made, used", [("winograd_2x2", "winograd_4x4"), ("winograd_6x6", "winograd_4x4"),
                                        ("fft", "fft_tiled"), ("fft_tiled", "winograd_2x2")])
def test_refuses_another_algorithm(made, used):
    refuses(ALGORITHMS[made].prepare(W, P, "forward"), ALGORITHMS[used], P, "forward")


@pytest.mark.parametrize("name", PREPARING)
def test_refuses_another_layer_or_dtype(name):
    algorithm = ALGORITHMS[name]
    prepared = algorithm.prepare(W, P, "forward")
    others = [ConvParams.from_shapes((2, 4, 12, 12), (5, 4, 3, 3), padding=1),          # K
              ConvParams.from_shapes((2, 6, 12, 12), (6, 3, 3, 3), padding=1, groups=2),  # groups, C/g
              ConvParams.from_shapes((2, 4, 12, 12), (6, 4, 3, 3), padding=1, dtype="float64")]
    for other in others:
        refuses(prepared, algorithm, other, "forward")


def test_fft_refuses_another_transform_size():
    """FFT's spectra are of a transform size: the whole-image fft's follows the image, fft_tiled's the tile
    its FLOP count picks (which can change with the batch)."""
    fft, tiled = ALGORITHMS["fft"], ALGORITHMS["fft_tiled"]
    refuses(fft.prepare(W, P, "forward"), fft, ConvParams.from_shapes((2, 4, 20, 20), P.weight_shape, padding=1),
            "forward")
    p1 = ConvParams.from_shapes((1, 64, 56, 56), (64, 64, 7, 7), padding=3)
    p8 = p1.with_batch(8)
    assert tiled.plan(p1).Th != tiled.plan(p8).Th           # measured FLOP choices: T=16 at N=1, 64 at N=8
    w = np.zeros(p1.weight_shape, np.float32)
    assert not tiled.prepare(w, p1, "forward").fits(tiled, p8, "forward")
    assert tiled.prepare(w, p1, "forward").fits(tiled, p1.with_batch(2), "forward")


def test_fits_across_the_batch_and_padding_for_winograd():
    """Winograd's U depends on the weight alone: it serves the layer at any batch, image size or padding."""
    algorithm = ALGORITHMS["winograd_4x4"]
    prepared = algorithm.prepare(W, P, "forward")
    other = ConvParams.from_shapes((5, 4, 7, 9), P.weight_shape, padding=((0, 2), (2, 1)))
    assert prepared.fits(algorithm, other, "forward")
    x = first_operand(other, "forward", np.float32)
    np.testing.assert_array_equal(run(algorithm, "forward", x, None, other, prepared=prepared),
                                  run(algorithm, "forward", x, W, other))


def test_prepare_checks_its_weight_and_layer():
    algorithm = ALGORITHMS["winograd_4x4"]
    with pytest.raises(ValueError, match=r"w must have the layer's weight shape \(6, 4, 3, 3\)"):
        algorithm.prepare(W[:, :3], P, "forward")
    five = ConvParams.from_shapes((1, 4, 12, 12), (6, 4, 5, 5), padding=2)
    with pytest.raises(UnsupportedError, match="needs a 3x3 kernel, got 5x5"):
        algorithm.prepare(np.zeros(five.weight_shape, np.float32), five, "forward")
    with pytest.raises(ValueError, match="op must be one of"):
        algorithm.prepare(W, P, "sideways")


def test_run_needs_a_weight_or_a_prepared_form():
    with pytest.raises(ValueError, match="second operand of forward is None"):
        run(ALGORITHMS["winograd_4x4"], "forward", first_operand(P, "forward", np.float32), None, P)


# ---- nothing to prepare -------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_prepare_returns_none_where_there_is_nothing_to_prepare(name):
    algorithm = ALGORITHMS[name]
    for op in PASSES:
        expected = name in PREPARING and op in WEIGHT_PASSES
        assert algorithm.prepares(op) == expected
        if not expected:
            assert algorithm.prepare(W, P, op) is None
            assert algorithm.prepare_bytes(P, op) == 0


def test_functional_api_unchanged():
    """conv2d prepares on each call, as before: its result is the plain run's."""
    x = first_operand(P, "forward", np.float32)
    y = convalgos.conv2d(x, W, padding=1, algo="winograd_4x4")
    np.testing.assert_array_equal(y, run(ALGORITHMS["winograd_4x4"], "forward", x, W, P))
