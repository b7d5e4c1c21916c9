"""autotune's JSON cache: round trip, bad files, foreign entries, two processes, AUTOTUNE_CACHE."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from autotune import Key, Tuner, cache
from autotune.heuristics import Heuristics
from autotune_fakes import FakeClock, fake_timer, fakes
from convalgos import ConvParams

HERE = os.path.dirname(__file__)


def tuned(path=None, Hs=(7,), **kw):
    clock = FakeClock()
    t = Tuner(fakes(clock, a=1e-3, b=2e-3), benchmark=True, timer=fake_timer(clock),
              heuristics=Heuristics({"rules": []}), cache_path=path, **kw)
    rng = np.random.default_rng(0)
    for H in Hs:
        t.conv2d(rng.standard_normal((1, 2, H, H)).astype(np.float32),
                 rng.standard_normal((3, 2, 3, 3)).astype(np.float32), padding=((1, 0), (2, 1)))
    return t


def fresh(**kw):
    clock = FakeClock()
    return Tuner(fakes(clock, a=1e-3, b=2e-3), timer=fake_timer(clock), heuristics=Heuristics({"rules": []}), **kw)


def test_key_serialises_losslessly():
    p = ConvParams.from_shapes((2, 4, 9, 8), (6, 2, 3, 1), stride=(2, 1), padding=((1, 0), (0, 2)),
                               dilation=(1, 2), groups=2, dtype="float16")
    key = Key(p, "channels_last", "cpu", True, 2)
    again = Key.from_dict(json.loads(json.dumps(key.to_dict())))
    assert again == key and hash(again) == hash(key)


def test_save_load_round_trip(tmp_path):
    path = str(tmp_path / "c.json")
    t = tuned(Hs=(7, 9))
    t.save(path)
    u = fresh()
    u.load(path)
    assert [e.to_dict() for e in u.dispatch_table()] == [e.to_dict() for e in t.dispatch_table()]
    data = json.load(open(path))
    assert data["schema"] == cache.SCHEMA and len(data["entries"]) == 2 and len(data["machines"]) == 1
    u.benchmark = True
    u.conv2d(np.zeros((1, 2, 7, 7), np.float32), np.zeros((3, 2, 3, 3), np.float32), padding=((1, 0), (2, 1)))
    assert u.cache_info().hits == 1 and u.cache_info().misses == 0        # the loaded entry is used


@pytest.mark.parametrize("content", ["", "{\"schema\": 1, \"machines\": {}, \"entr", "[1, 2]", "not json",
                                     "{\"schema\": 99, \"machines\": {}, \"entries\": []}",
                                     "{\"schema\": 1, \"machines\": [], \"entries\": {}}"])
def test_corrupt_truncated_or_foreign_schema_warns_and_gives_empty_table(tmp_path, content):
    path = tmp_path / "c.json"
    path.write_text(content)
    u = fresh()
    with pytest.warns(UserWarning, match="not used"):
        u.load(str(path))
    assert len(u.dispatch_table()) == 0
    t = tuned()
    with pytest.warns(UserWarning):
        t.save(str(path))                    # a bad file is replaced, not crashed on
    assert len(json.load(open(path))["entries"]) == 1


def test_truncated_real_file(tmp_path):
    path = str(tmp_path / "c.json")
    tuned().save(path)
    text = open(path).read()
    open(path, "w").write(text[: len(text) // 2])
    u = fresh()
    with pytest.warns(UserWarning):
        u.load(path)
    assert len(u.dispatch_table()) == 0


@pytest.mark.parametrize("field", ["version", "machine"])
def test_foreign_version_or_fingerprint_not_used_but_kept_and_reported(tmp_path, field):
    path = str(tmp_path / "c.json")
    tuned().save(path)
    data = json.load(open(path))
    data["entries"][0][field] = "0.0.0-other" if field == "version" else "another-box"
    json.dump(data, open(path, "w"))
    u = fresh()
    u.load(path)
    table = u.dispatch_table()
    assert len(table) == 0 and "1 entries from another machine or library version not used" in str(table)
    tuned(Hs=(9,)).save(path)               # a foreign entry survives another process's save
    u.save(path)
    assert len(json.load(open(path))["entries"]) == 2


def test_malformed_entry_skipped_with_warning(tmp_path):
    path = str(tmp_path / "c.json")
    tuned(Hs=(7, 9)).save(path)
    data = json.load(open(path))
    data["entries"][0]["entry"]["key"]["params"]["N"] = "x" * 3
    del data["entries"][1]["entry"]["algo"]
    json.dump(data, open(path, "w"))
    u = fresh()
    with pytest.warns(UserWarning, match="malformed"):
        u.load(path)


SCRIPT = textwrap.dedent("""
    import sys, numpy as np
    sys.path.insert(0, {tests!r})
    from autotune import Tuner
    from autotune.heuristics import Heuristics
    from autotune_fakes import FakeClock, fake_timer, fakes
    clock = FakeClock()
    t = Tuner(fakes(clock, a=1e-3, b=2e-3), benchmark=True, timer=fake_timer(clock),
              heuristics=Heuristics({{"rules": []}}), cache_path={cache})
    for H in range({first}, {first} + 12):
        t.conv2d(np.ones((1, 2, H, H), np.float32), np.ones((3, 2, 3, 3), np.float32))
    print(t.cache_info().misses)
""")


def test_two_processes_writing_one_cache_lose_no_entry(tmp_path):
    path = str(tmp_path / "shared.json")
    env = dict(os.environ, NUMBA_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, "-c", SCRIPT.format(tests=HERE, cache=repr(path), first=first)],
                              env=env, stdout=subprocess.PIPE, text=True) for first in (5, 17)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0] and [o.split()[-1] for o in outs] == ["12", "12"]
    keys = {json.dumps(r["entry"]["key"], sort_keys=True) for r in json.load(open(path))["entries"]}
    assert len(keys) == 24
    assert not [f for f in os.listdir(tmp_path) if f.startswith("shared.json.") and f != "shared.json.lock"]


def test_autotune_cache_environment_variable(tmp_path):
    path = str(tmp_path / "env.json")
    script = SCRIPT.format(tests=HERE, cache="__import__('autotune').tuner.ENV", first=5)
    env = dict(os.environ, AUTOTUNE_CACHE=path, NUMBA_NUM_THREADS="1")
    first = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    assert first.stdout.split()[-1] == "12" and len(json.load(open(path))["entries"]) == 12
    again = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert again.stdout.split()[-1] == "0"                   # loaded at first use: every key a hit
