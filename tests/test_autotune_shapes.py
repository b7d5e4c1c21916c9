"""Changing shapes: per-layer counts, the INFO log of every tuning, one warning past the threshold, and the
patience policy (fake algorithms and the fake clock)."""
import logging
import warnings

import numpy as np
import pytest

from autotune import Tuner
from autotune.shapes import RetuningWarning, layer_of
from autotune_fakes import NO_RULES, FakeClock, FakeReader, fake_timer, fakes


def arrays(N=2, H=7, C=3, K=4, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((N, C, H, H)).astype(np.float32),
            rng.standard_normal((K, C, 3, 3)).astype(np.float32))


def tuner(clock, algos=None, **kw):
    algos = fakes(clock, a=1e-3, b=2e-3) if algos is None else algos
    return Tuner(algos, benchmark=True, timer=fake_timer(clock), reader=FakeReader(clock), pair_below=0.0, heuristics=NO_RULES, **kw)


def test_counts_per_layer_log_every_tuning_and_warn_once(caplog):
    clock = FakeClock()
    t = tuner(clock, retune_warning=2)
    x, w = arrays()
    with caplog.at_level(logging.INFO, logger="autotune"), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for N in (1, 2, 3, 4):
            t.conv2d(np.repeat(x[:1], N, axis=0), w)
        t.conv2d(*arrays(N=2, C=5))                     # another layer: counted apart
        t.conv2d(np.repeat(x[:1], 4, axis=0), w)        # a hit: nothing logged or counted
    layers = t.cache_info().layers
    first = layer_of(t.dispatch_table().entries[0].key)
    assert layers[first].shapes == 4 and layers[first].tunings == 4
    assert layers[first].seconds == pytest.approx(sum(e.tuning_seconds for e in t.dispatch_table().entries[:4]))
    assert sorted(li.shapes for li in layers.values()) == [1, 4]
    tunings = [r for r in caplog.records if r.levelno == logging.INFO]
    assert len(tunings) == 5 and all(r.getMessage().endswith(": a") for r in tunings)
    assert "4x3x7x7" in tunings[3].getMessage() and first in tunings[3].getMessage()
    warned = [w for w in caught if issubclass(w.category, RetuningWarning)]
    assert len(warned) == 1 and "3 distinct input shapes" in str(warned[0].message)
    assert "patience" in str(warned[0].message) and [r for r in caplog.records if r.levelno == logging.WARNING]
    assert f"{first}: 4 input shapes tuned" in str(t.dispatch_table())


def test_the_passes_of_one_shape_count_as_one_shape():
    clock = FakeClock()
    t = tuner(clock)
    x, w = arrays()
    y = t.conv2d(x, w, padding=1)
    t.conv2d_input(x.shape, w, y, padding=1)
    t.conv2d_weight(x, w.shape, y, padding=1)
    (info,) = t.cache_info().layers.values()
    assert (info.shapes, info.tunings) == (1, 3)


def test_patience_reuses_the_nearest_tuned_shape_and_says_so():
    clock = FakeClock()
    algos = fakes(clock, a=1e-3, b=2e-3)
    t = tuner(clock, algos, patience=2)
    x, w = arrays(N=8, H=16)
    t.conv2d(x[:2], w)
    t.conv2d(x, w)
    calls = {n: a.calls for n, a in algos.items()}
    t.conv2d(x[:7], w)                                  # a third batch size: not timed
    assert algos["b"].calls == calls["b"] and algos["a"].calls == calls["a"] + 1
    entry = t.dispatch_table().entries[-1]
    assert entry.source == "patience" and entry.algo == "a" and entry.times == {}
    assert "N8 C3 16x16" in entry.rule and "patience=2" in entry.rule    # nearest to N=7 is N=8, not N=2
    assert next(iter(t.cache_info().layers.values())).shapes == 2
    t.conv2d(x[:7], w)
    assert t.cache_info().hits == 1                     # the patience entry is used in benchmark mode
    y = t.conv2d_input(x[:7].shape, w, np.ones((7, 4, 14, 14), np.float32))
    bd = t.dispatch_table().entries[-1]                 # no tuned backward pass: the heuristic's, so marked
    assert bd.key.op == "backward_data" and bd.source == "patience" and "no tuned shape" in bd.rule
    assert y.shape == (7, 3, 16, 16)
