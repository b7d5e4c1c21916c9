"""autotune's JSON cache: round trip, files never lost (bad paths, bad files, old schema), one warning per
problem, no lock beside the file, two processes, AUTOTUNE_CACHE."""
import json
import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

from autotune import Entry, Key, Tuner, cache
from autotune.heuristics import Heuristics
from autotune_fakes import FakeClock, FakeReader, fake_timer, fakes
from convalgos import ConvParams

HERE = os.path.dirname(__file__)
ROOT = os.path.dirname(HERE)


@pytest.fixture(autouse=True)
def fresh_reports():
    """Each test sees its own first warning (the cache warns once per path and reason per process)."""
    cache._reported.clear()


def entry(H, algo="a", op="forward"):
    p = ConvParams.from_shapes((1, 2, H, H), (3, 2, 3, 3), padding=((1, 0), (2, 1)))
    return Entry(Key(p, op=op), algo, "benchmark", times={algo: 1e-3}, runs={algo: 3})


def saved_keys(path) -> set:
    return {json.dumps(r["entry"]["key"], sort_keys=True) for r in json.load(open(path))["entries"]}


def caught(fn, *args):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        result = fn(*args)
    return result, [str(w.message) for w in seen if issubclass(w.category, UserWarning)]


def test_key_serialises_losslessly_with_its_pass():
    p = ConvParams.from_shapes((2, 4, 9, 8), (6, 2, 3, 1), stride=(2, 1), padding=((1, 0), (0, 2)),
                               dilation=(1, 2), groups=2, dtype="float16")
    key = Key(p, "channels_last", "cpu", True, 2, op="backward_filter")
    again = Key.from_dict(json.loads(json.dumps(key.to_dict())))
    assert again == key and hash(again) == hash(key) and again.op == "backward_filter"


def test_save_load_round_trip(tmp_path):
    path = str(tmp_path / "c.json")
    mine = [entry(7), entry(9), entry(7, "b", op="backward_data")]
    assert cache.save(path, mine, []) is True
    usable, foreign, notes = cache.load(path)
    assert [e.to_dict() for e in usable] == [e.to_dict() for e in mine] and not foreign and not notes
    data = json.load(open(path))
    assert data["schema"] == cache.SCHEMA == 2 and len(data["machines"]) == 1
    assert cache.problem(path) is None and cache.problem(str(tmp_path / "new.json")) is None


def test_nothing_left_beside_the_cache(tmp_path):
    path = str(tmp_path / "c.json")
    cache.save(path, [entry(7)], [])
    cache.save(path, [entry(9)], [])
    assert os.listdir(tmp_path) == ["c.json"]
    assert os.path.dirname(cache.lock_path(path)) != str(tmp_path)
    assert os.path.basename(cache.lock_path(path)).startswith(".")


BAD_FILES = {
    "empty": "",
    "corrupt": "not json {",
    "truncated": '{"schema": 2, "machines": {}, "entr',
    "foreign JSON list": "[1, 2]",
    "foreign JSON object": '{"model": "lenet5", "layers": [], "entries": []}',
    "old schema": '{"schema": 1, "machines": {}, "entries": []}',
    "newer schema": '{"schema": 99, "machines": {}, "entries": []}',
    "wrong layout": '{"schema": 2, "machines": [], "entries": {}}',
}


@pytest.mark.parametrize("kind", list(BAD_FILES))
def test_a_file_that_is_not_a_cache_is_never_overwritten_and_reported_once(tmp_path, kind):
    path = tmp_path / "c.json"
    path.write_text(BAD_FILES[kind])
    (usable, foreign, notes), first = caught(cache.load, str(path))
    assert usable == [] and foreign == [] and notes
    saved, second = caught(cache.save, str(path), [entry(7)], [])
    again, third = caught(cache.save, str(path), [entry(9)], [])
    assert saved is False and again is False
    assert path.read_text() == BAD_FILES[kind]                  # the user's file, byte for byte
    assert len(first + second + third) == 1 and str(path) in first[0] and "not overwritten" in first[0]
    assert cache.problem(str(path))
    assert os.listdir(tmp_path) == ["c.json"]


def test_old_schema_says_which_schema(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(BAD_FILES["old schema"])
    assert "schema 1" in cache.problem(str(path)) and "schema 2" in cache.problem(str(path))


def test_a_truncated_real_cache_is_kept(tmp_path):
    path = str(tmp_path / "c.json")
    cache.save(path, [entry(7), entry(9)], [])
    text = open(path).read()
    open(path, "w").write(text[: len(text) // 2])
    (usable, _, _), seen = caught(cache.load, path)
    assert usable == [] and len(seen) == 1 and "JSON" in seen[0]
    assert cache.save(path, [entry(11)], []) is False and open(path).read() == text[: len(text) // 2]


@pytest.mark.parametrize("where", ["missing directory", "directory", "read-only place"])
def test_a_path_that_cannot_be_written_is_one_warning_not_an_exception(tmp_path, where):
    path = {"missing directory": str(tmp_path / "nowhere" / "c.json"), "directory": str(tmp_path),
            "read-only place": f"/proc/autotune-test-{os.getpid()}.json"}[where]
    saved, seen = caught(cache.save, path, [entry(7)], [])
    again, more = caught(cache.save, path, [entry(9)], [])
    assert saved is False and again is False and len(seen) == 1 and more == []
    assert path in seen[0] and "not saved" in seen[0]
    assert cache.problem(path) and cache.writable_problem(path)
    if where == "directory":
        assert os.listdir(tmp_path) == []


def test_a_folder_without_write_permission(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root writes anywhere")
    folder = tmp_path / "ro"
    folder.mkdir(mode=0o500)
    saved, seen = caught(cache.save, str(folder / "c.json"), [entry(7)], [])
    assert saved is False and "not writable" in seen[0]


@pytest.mark.parametrize("field", ["version", "machine"])
def test_foreign_version_or_fingerprint_not_used_but_kept_and_reported(tmp_path, field):
    path = str(tmp_path / "c.json")
    cache.save(path, [entry(7)], [])
    data = json.load(open(path))
    data["entries"][0][field] = "0.0.0-other" if field == "version" else "another-box"
    json.dump(data, open(path, "w"))
    usable, foreign, notes = cache.load(path)
    assert usable == [] and len(foreign) == 1 and "1 entries from another machine" in notes[0]
    cache.save(path, [entry(9)], foreign)
    assert len(json.load(open(path))["entries"]) == 2


def test_malformed_entries_are_skipped_with_one_warning_and_kept_in_the_file(tmp_path):
    path = str(tmp_path / "c.json")
    cache.save(path, [entry(7), entry(9)], [])
    data = json.load(open(path))
    del data["entries"][0]["entry"]["algo"]
    data["entries"].append(["not", "an", "entry"])
    json.dump(data, open(path, "w"))
    (usable, _, _), seen = caught(cache.load, path)
    assert len(usable) == 1 and len(seen) == 1 and "2 malformed entries" in seen[0]
    cache.save(path, [entry(11)], [])
    assert len(json.load(open(path))["entries"]) == 4                   # nothing dropped


TWO = textwrap.dedent("""
    import sys
    sys.path.insert(0, {tests!r})
    from autotune import cache
    from test_autotune_cache import entry
    for H in range({first}, {first} + 12):
        assert cache.save({path!r}, [entry(H)], [])
""")


def test_two_processes_saving_different_entries_lose_nothing(tmp_path):
    path = str(tmp_path / "shared.json")
    env = dict(os.environ, NUMBA_NUM_THREADS="1", PYTHONPATH=ROOT)
    procs = [subprocess.Popen([sys.executable, "-c", TWO.format(tests=HERE, path=path, first=first)], env=env,
                              stderr=subprocess.PIPE, text=True) for first in (5, 17)]
    errors = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errors
    assert len(saved_keys(path)) == 24 and os.listdir(tmp_path) == ["shared.json"]


# ---- through the Tuner and autotune.conv2d -----------------------------------------------------------------
def tuner(path):
    clock = FakeClock()
    return Tuner(fakes(clock, a=1e-3, b=2e-3), benchmark=True, timer=fake_timer(clock), reader=FakeReader(clock), pair_below=0.0,
                 heuristics=Heuristics({"rules": []}), cache_path=path)


def test_a_tuner_on_a_foreign_file_warns_once_keeps_the_file_and_its_table(tmp_path):
    path = tmp_path / "out.json"
    path.write_text(BAD_FILES["foreign JSON object"])
    t = tuner(str(path))
    rng = np.random.default_rng(0)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for H in (7, 8, 9):
            t.conv2d(rng.standard_normal((1, 2, H, H)).astype(np.float32),
                     rng.standard_normal((3, 2, 3, 3)).astype(np.float32))
    assert len([w for w in seen if str(path) in str(w.message)]) == 1
    assert path.read_text() == BAD_FILES["foreign JSON object"] and len(t.dispatch_table()) == 3


CONV = textwrap.dedent("""
    import numpy as np, autotune
    autotune.benchmark, autotune.benchmark_limit = True, 1
    x, w = np.ones((1, 2, 8, 8), np.float32), np.ones((3, 2, 3, 3), np.float32)
    for H in (8, 9):
        y = autotune.conv2d(np.ones((1, 2, H, H), np.float32), w, padding=1)
    assert float(y[0, 0, 4, 4]) == 18.0 and len(autotune.dispatch_table()) == 2
    print("ok")
""")


@pytest.mark.parametrize("where", ["missing directory", "directory"])
def test_autotune_conv2d_never_fails_for_want_of_a_cache(tmp_path, where):
    path = str(tmp_path / "nowhere" / "c.json") if where == "missing directory" else str(tmp_path)
    env = dict(os.environ, AUTOTUNE_CACHE=path, NUMBA_NUM_THREADS="1", PYTHONPATH=ROOT)
    done = subprocess.run([sys.executable, "-c", CONV], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.split()[-1] == "ok", done.stderr
    assert done.stderr.count(path) == 1 and "Traceback" not in done.stderr
    assert os.listdir(tmp_path) == []


ENV = textwrap.dedent("""
    import sys, numpy as np
    sys.path.insert(0, {tests!r})
    from autotune import Tuner
    from autotune.heuristics import Heuristics
    from autotune_fakes import FakeClock, FakeReader, fake_timer, fakes
    clock = FakeClock()
    t = Tuner(fakes(clock, a=1e-3, b=2e-3), benchmark=True, timer=fake_timer(clock), reader=FakeReader(clock), pair_below=0.0,
              heuristics=Heuristics({{"rules": []}}), cache_path=__import__('autotune').tuner.ENV)
    for H in range(5, 9):
        t.conv2d(np.ones((1, 2, H, H), np.float32), np.ones((3, 2, 3, 3), np.float32))
    print(t.cache_info().misses)
""")


def test_autotune_cache_environment_variable(tmp_path):
    path = str(tmp_path / "env.json")
    env = dict(os.environ, AUTOTUNE_CACHE=path, NUMBA_NUM_THREADS="1", PYTHONPATH=ROOT)
    script = ENV.format(tests=HERE)
    first = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    assert first.stdout.split()[-1] == "4" and len(json.load(open(path))["entries"]) == 4
    again = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert again.stdout.split()[-1] == "0"                   # loaded at first use: every key a hit
