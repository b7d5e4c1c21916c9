"""The parts of convalgos.testing on their own: the layer strategy and its constraints, seeded operands, the
closeness measure and its message, and the hypothesis profiles."""
import numpy as np
import pytest
from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st

from convalgos import ConvParams, reference
from convalgos.testing import assert_conv_close, conv_error, kit_settings, layer_arrays, layers, operands
from convalgos.testing.strategies import padding_forms

FIND = settings(database=None, max_examples=3000, suppress_health_check=list(HealthCheck))
SOME = settings(max_examples=40, deadline=None, database=None)


FEATURES = {
    "asymmetric padding": lambda p: any(t != b for t, b in p.padding),
    "dilation": lambda p: p.dilation != (1, 1),
    "stride 3": lambda p: 3 in p.stride,
    "groups": lambda p: p.groups > 1 and not p.is_depthwise,
    "depthwise": lambda p: p.is_depthwise and p.C > 1,
    "a 5-tap kernel side": lambda p: 5 in (p.R, p.S),
    "float16": lambda p: p.dtype == "float16",
    "float64": lambda p: p.dtype == "float64",
    "a layer as small as can be": lambda p: p.out_hw == (1, 1) and p.N == p.C == p.K == 1,
}


def test_layers_draw_every_feature():
    seen = set()

    @settings(max_examples=300, database=None, deadline=None)
    @given(p=layers())
    def draw(p):
        assert p.out_hw[0] >= 1 and p.out_hw[1] >= 1
        seen.update(name for name, has_it in FEATURES.items() if has_it(p))

    draw()
    assert seen == set(FEATURES)


def test_padding_is_drawn_in_every_form():
    for form, is_it in [("int", lambda v: isinstance(v, int)), ("same", lambda v: v == "same"),
                        ("valid", lambda v: v == "valid"),
                        ("pair", lambda v: isinstance(v, tuple) and isinstance(v[0], int)),
                        ("pairs", lambda v: isinstance(v, tuple) and isinstance(v[0], tuple) and v[0][0] != v[0][1])]:
        assert is_it(find(padding_forms((1, 1)), is_it, settings=FIND)), form
    assert find(padding_forms((2, 1)), lambda v: True, settings=FIND) != "same"


@SOME
@given(p=layers(kernel=(3, 3), stride=1, dilation=st.sampled_from([2]), groups="depthwise", dtype="float64",
                padding="same", size=(7, 9)))
def test_constraints_fix_features_or_draw_them_from_a_strategy(p):
    assert (p.R, p.S, p.stride, p.dilation, p.dtype) == (3, 3, (1, 1), (2, 2), "float64")
    assert p.is_depthwise and (p.H, p.W) == (7, 9) and p.out_hw == (7, 9)          # "same" keeps the size


@SOME
@given(p=layers(in_channels=6, out_channels=4, groups=2, batch=0))
def test_channel_totals_and_an_empty_batch(p):
    assert (p.N, p.C, p.K, p.groups, p.Cg, p.Kg) == (0, 6, 4, 2, 3, 2)


def test_operands_are_seeded_and_shared_by_the_passes():
    p = ConvParams.from_shapes((2, 4, 6, 5), (6, 2, 3, 2), stride=(2, 1), groups=2, dtype="float16")
    arrays = layer_arrays(p, seed=7)
    assert {k: (v.shape, v.dtype) for k, v in arrays.items()} == {
        "x": (p.in_shape, np.float16), "w": (p.weight_shape, np.float16), "dy": (p.out_shape, np.float16)}
    x, w = operands(p, "forward", seed=7)
    dy, w2 = operands(p, "backward_data", seed=7)
    x2, dy2 = operands(p, "backward_filter", seed=7)
    assert all(np.array_equal(a, b) for a, b in [(x, x2), (w, w2), (dy, dy2), (x, arrays["x"])])
    assert not np.array_equal(operands(p, "forward", seed=8)[0], x)
    with pytest.raises(ValueError, match="op must be one of"):
        operands(p, "sideways")


def cancelling_layer():
    """One output of 150 terms of size ~1 that cancel to about 1e-3 (the case hypothesis once found)."""
    p = ConvParams.from_shapes((1, 6, 5, 5), (1, 6, 5, 5), dtype="float64")
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal(p.in_shape), rng.standard_normal(p.weight_shape)
    w[0, 0, 0, 0] -= (reference.forward(x, w, p).item() - 1e-3) / x[0, 0, 0, 0]
    return p, x, w, reference.forward(x, w, p)


def test_the_measure_is_normwise_unless_the_outputs_cancel():
    p, x, w, ref = cancelling_layer()
    assert abs(ref.item()) == pytest.approx(1e-3)
    rounded = ref + 2e-6                                 # what float32 rounding of terms of size ~1 gives
    assert conv_error(rounded, ref) == pytest.approx(2e-3)            # plain normwise: 2e-6 / 1e-3
    safe = conv_error(rounded, ref, layer=p, operands=(x, w))
    assert safe < 1e-6                                   # scale: max |x| * |w| sum / sqrt(150), not 1e-3
    assert assert_conv_close(rounded, ref, tolerance=5e-6, layer=p, operands=(x, w)) == safe
    y = np.full((2, 3, 4, 4), 2.0)
    assert conv_error(y * (1 + 1e-7), y) == pytest.approx(1e-7)       # no cancellation: the plain measure


def test_a_failure_names_the_layer_the_error_and_the_worst_element():
    p, x, w, ref = cancelling_layer()
    wrong = ref + 0.5
    with pytest.raises(AssertionError, match=r"forward of N1 C6 5x5 -> K1 5x5 float64: error .* over the "
                                             r"tolerance 5e-06; worst element at index \(0, 0, 0, 0\)"):
        assert_conv_close(wrong, ref, tolerance=5e-6, layer=p, operands=(x, w))
    with pytest.raises(AssertionError, match="holds 1 non-finite values of 1"):
        assert_conv_close(np.full_like(ref, np.nan), ref, tolerance=1.0, layer=p, operands=(x, w))
    with pytest.raises(ValueError, match="differs from the reference's"):
        conv_error(np.zeros((1, 1, 1, 2)), ref)


def test_profiles_make_the_users_default_larger_than_the_projects(monkeypatch):
    monkeypatch.delenv("CONVALGOS_TESTING_PROFILE", raising=False)
    assert kit_settings().max_examples == 100 and kit_settings().deadline is None
    assert kit_settings("convalgos-quick").max_examples < 20 < kit_settings("convalgos-thorough").max_examples
    assert kit_settings("convalgos", max_examples=7).max_examples == 7
    monkeypatch.setenv("CONVALGOS_TESTING_PROFILE", "convalgos-thorough")
    assert kit_settings().max_examples == 1000
    assert kit_settings(settings(max_examples=3, report_multiple_bugs=True)).report_multiple_bugs is False
