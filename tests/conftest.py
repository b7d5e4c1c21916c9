"""The suite's two hooks: on a cold kernel cache the kernels are compiled over every core before the first test
(``pytest_sessionstart``, ``convalgos.warm``); and, opt-in, the tuner's choices shuffled, to find tests that
hold only for the choice this machine makes.

    AUTOTUNE_TEST_SHUFFLE=<seed> python -m pytest -q

Which algorithm the tuner picks depends on the machine: a race on its timings, a heuristic on the file measured
on another one (``bench.heuristics`` writes it anew per machine). A test that lets the tuner choose must hold
for every choice it could make. With the variable set, every such choice in this process is drawn at random
(seeded by the variable and the key, so one key gets one choice, as in the table):
- a race (benchmark on): among the candidates that passed the reference check and were raced;
- the heuristic (benchmark off), where the tuner has the measured rules (``heuristics.json``): among the
  ranked candidates the rule does not find ``prune_ratio`` times slower than its best.
A test that fakes the clock (a ``timer`` given) or gives its own rules pins the choice: that is left alone.
Subprocesses a test starts are not shuffled. Unset (the default), nothing here runs.
"""
import os
import random
import zlib

import pytest

SHUFFLE_SEED = os.environ.get("AUTOTUNE_TEST_SHUFFLE", "")


def _draw(names, key) -> str:
    """One of ``names``, the same for the same key and seed."""
    return random.Random(zlib.crc32(f"{SHUFFLE_SEED}:{key}".encode())).choice(sorted(names))


@pytest.fixture(autouse=True)
def shuffled_choices(monkeypatch):
    if not SHUFFLE_SEED:
        yield
        return
    from autotune import tuner as tuner_module

    tune, heuristic_entry = tuner_module.tune, tuner_module.heuristic_entry

    def shuffled_tune(tuner, key, *args, **kwargs):
        entry = tune(tuner, key, *args, **kwargs)
        if tuner.timer is None:                                 # a faked clock pins the choice
            entry.algo = _draw(entry.times, key)                # the raced: every one passed the check
            entry.tied = [entry.algo]
            entry.ranked = [entry.algo] + [n for n in entry.ranked if n != entry.algo]
        return entry

    def shuffled_heuristic_entry(tuner, key, registry, kind, *args, **kwargs):
        entry = heuristic_entry(tuner, key, registry, kind, *args, **kwargs)
        if "machine" not in tuner.heuristics.data or tuner.timer is not None:
            return entry                                        # the test's own rules pin the choice
        slow = tuner.heuristics.slowdowns(entry.rule, entry.ranked, op=key.op, device=kind, prepared=key.prepared,
                                          p=key.params)
        fair = [n for n in entry.ranked if slow.get(n, 1.0) < (tuner.prune_ratio or float("inf"))]
        entry.algo = _draw(fair, key)
        entry.ranked = [entry.algo] + [n for n in entry.ranked if n != entry.algo]
        return entry

    monkeypatch.setattr(tuner_module, "tune", shuffled_tune)
    monkeypatch.setattr(tuner_module, "heuristic_entry", shuffled_heuristic_entry)
    yield


def pytest_sessionstart(session):
    """On a cold kernel cache (a fresh clone: nothing compiled yet), compile the kernels over every core first
    (``convalgos.warm``: the suite took 847 s cold, 295 s warm, on 2 cores); the tests then load them."""
    from convalgos import warm
    if warm.cold():
        print(f"\nconvalgos.warm: compiled the kernels over the cores in {warm.warm(quiet=True):.0f} s")
