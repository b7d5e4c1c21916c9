"""autotune.profile: per-layer recording, shapes without computing, the sizes a model takes, timing passes
(warm-up of peers before the abandon rule), per-layer medians, and what a comparison may claim."""
import numpy as np
import pytest

import autotune
from autotune import Entry, Key, models, nn, profile
from autotune.cache import cpu_model
from autotune.measure import Timer
from autotune_fakes import FakeClock
from convalgos import ConvParams
from float32_bounds import PLAIN_SUM, within


def lenet():
    return models.get_model("lenet5")


def test_conv_profile_records_every_call_and_restores_the_layers():
    model, clock = lenet(), FakeClock()
    x = np.random.default_rng(0).standard_normal((2, 1, 32, 32)).astype(np.float32)
    convs = dict(nn.conv_layers(model))

    def fake(x, w, b, stride, padding, dilation, groups):           # a conv that costs 5 ms of fake time
        clock.advance(5e-3)
        return profile.layers._no_conv(x, w, b, stride, padding, dilation, groups)

    with nn.use_algorithm(model, fake), profile.ConvProfile(model, timer=Timer(clock)) as prof:
        model(x)
        model(x)
    assert [name for name, _ in prof.calls] == ["conv1", "conv2"] * 2
    assert prof.params["conv2"].in_shape == (2, 6, 14, 14) and len(prof.layers()) == 2
    assert prof.seconds == {"conv1": pytest.approx(5e-3), "conv2": pytest.approx(5e-3)}
    assert all("forward" not in conv.__dict__ for conv in convs.values())    # unwrapped on exit


def test_conv_calls_find_shapes_and_the_sizes_a_model_takes():
    model = lenet()
    calls = profile.conv_calls(model, (3, 1, 32, 32))
    assert [(n, p.in_shape, p.out_shape) for n, p in calls] == [
        ("conv1", (3, 1, 32, 32), (3, 6, 28, 28)), ("conv2", (3, 6, 14, 14), (3, 16, 10, 10))]
    with pytest.raises(ValueError):
        profile.conv_calls(model, (1, 1, 36, 36))
    assert profile.accepted_sizes(model, 64) == [32, 33, 34, 35]
    assert profile.spans([1, 2, 3, 7, 9, 10]) == "1-3, 7, 9-10" and profile.spans([]) == ""


def fake_conv(clock, costs):
    """A conv-like callable that advances ``clock`` by costs[i] on its i-th call (the last repeating)."""
    calls = [0]

    def conv(*args):
        clock.advance(costs[min(calls[0], len(costs) - 1)])
        calls[0] += 1
    return conv


def test_a_peer_is_warmed_up_before_the_abandon_rule_and_a_slow_pass_is_abandoned():
    clock = FakeClock()
    passes = {"autotuned": fake_conv(clock, [1e-3]),
              "torch": fake_conv(clock, [10.0, 1e-3]),        # slow first call (thread pools), then fast
              "slow": fake_conv(clock, [1.0])}

    def workload(conv):                                        # two conv calls per pass
        conv()
        conv()

    times, abandoned = profile.time_passes(workload, passes, 3, timer=Timer(clock))
    assert list(abandoned) == ["slow"] and "1 conv calls done" in abandoned["slow"]
    assert times == {"autotuned": pytest.approx(2e-3), "torch": pytest.approx(2e-3)}
    _, never = profile.time_passes(workload, dict(passes, slow=fake_conv(clock, [1.0])), 1, timer=Timer(clock),
                                   abandon_ratio=None)
    assert never == {}


def test_time_layers_gives_a_median_per_layer_per_pass():
    model = lenet()
    x = np.random.default_rng(0).standard_normal((1, 1, 32, 32)).astype(np.float32)
    medians = profile.time_layers(model, x, {"direct": "direct", "im2col": "im2col"}, 2)
    assert set(medians) == {"direct", "im2col"}
    assert all(set(per) == {"conv1", "conv2"} and min(per.values()) > 0 for per in medians.values())


def test_layer_workload_runs_every_call_with_the_layers_weights():
    model = lenet()
    calls = profile.conv_calls(model, (2, 1, 32, 32))
    seen = []
    run = profile.layer_workload(calls, dict(nn.conv_layers(model)))
    run(lambda x, w, b, *layer: seen.append((x.shape, w.shape, layer)))
    assert seen == [((2, 1, 32, 32), (6, 1, 5, 5), (1, 0, 1, 1)), ((2, 6, 14, 14), (16, 6, 5, 5), (1, 0, 1, 1))]
    run("direct")                                             # a name runs convalgos' algorithm


def test_forward_entries_pick_the_forward_pass_on_the_device():
    p = ConvParams.from_shapes((1, 2, 8, 8), (3, 2, 3, 3))
    q = ConvParams.from_shapes((1, 2, 9, 9), (3, 2, 3, 3))
    table = [Entry(Key(p, op="backward_data"), "b", "benchmark"), Entry(Key(p), "a", "benchmark"),
             Entry(Key(p, device="cuda:sim"), "g", "benchmark"), Entry(Key(q), "c", "heuristic")]
    assert {k: e.algo for k, e in profile.forward_entries([p], table).items()} == {p: "a"}
    assert {k: e.algo for k, e in profile.forward_entries([p], table, device="cuda").items()} == {p: "g"}


def test_compare_says_when_the_autotuner_made_the_same_choice():
    times = {"autotuned": 1.0, "direct": 2.0, "im2col": 1.25}
    same = profile.compare(times, ["im2col", "im2col"], ["direct", "im2col"])
    assert same == {"best_single": "im2col", "ratio": 1.25, "same_choice": True}
    differ = profile.compare(times, ["im2col", "direct"], ["direct", "im2col"])
    assert differ["same_choice"] is False and differ["best_single"] == "im2col"
    assert profile.compare({"autotuned": 1.0}, [], ["direct"]) == {}


def test_device_description_names_the_cpu():
    assert cpu_model() in profile.device_description("cpu") and "threads" in profile.device_description("cpu")


def test_profile_records_a_fused_model_whose_convs_take_an_epilogue_operand():
    tuner = autotune.Tuner()
    net = models.resnet20(tuner=tuner)
    net.eval()
    net.fuse()                      # fused blocks call conv2.forward(hidden, residual=shortcut)
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    plain = models.resnet20(tuner=tuner)(x)
    with profile.ConvProfile(net) as prof:
        y = net(x)
    assert len(prof.calls) == 21 and set(prof.seconds) == {name for name, _ in prof.calls}
    assert within(y, plain, len(prof.calls) * PLAIN_SUM)     # the same choices; BatchNorm folded: one more rounding
