"""The benchmarks' own machinery on tiny layers: the torch twin of a model, a clocked training step and its reset,
one layer's passes timed, the noisy neighbour, and the import orders (fresh processes, each with its first
import; bench.nets, bench.train and bench.autotune --quick end to end, one child process each). Timings are never
asserted, only what was timed."""
import subprocess
import sys
import time
from collections import defaultdict

import numpy as np
import pytest

import autotune
from autotune import models, nn
from bench import algorithms, nets, orders, train
from bench import autotune as autotune_bench
from bench.autotune import Neighbour
from bench.layers import layer
from convalgos import ALGORITHMS, PASSES


@pytest.mark.parametrize("name", ["lenet5", "resnet20"])
def test_torch_twin_takes_the_same_step_and_every_conv_pass_is_clocked(name):
    pytest.importorskip("torch")
    model = models.get_model(name)
    state = {k: np.array(v) for k, v in model.state_dict().items()}
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2,) + model.input_shape).astype(np.float32)
    labels = np.array([1, 7])
    log = defaultdict(list)
    ours = train.our_step(name, autotune.Tuner(), state, x, labels, log)
    theirs = train.torch_step(model, state, x, labels)
    first = ours()
    assert abs(first - theirs()) <= 1e-4 * abs(first)
    assert ours() != first                           # the weights moved
    ours.reset()
    assert ours() == pytest.approx(first, rel=1e-6)  # reset: the same step again
    convs = [n for n, _ in nn.conv_layers(model)]
    expected = {(n, op) for n in convs for op in PASSES if not (n == convs[0] and op == "backward_data")}
    assert set(log) == expected and all(len(times) == 3 for times in log.values())


def test_time_pass_times_every_algorithm_that_supports_the_pass():
    p = layer(1, 4, 6, 4, 3)
    x, w, dy = algorithms.arrays(p)
    for op in PASSES:
        times, once = algorithms.time_pass(p, op, x, w, dy, rounds=1, peer=False)
        assert set(times) == {n for n, a in ALGORITHMS.items() if a.supports(p, op)}
        assert once <= set(times) and all(t > 0 for t in times.values())


def state(pid) -> str:
    """The process's scheduler state letter (Linux): "T" when stopped."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def settles(pid, stopped: bool) -> bool:
    """Whether the process reaches (or stays in) the stopped state or out of it within a second."""
    deadline = time.monotonic() + 1.0
    while (state(pid) == "T") != stopped:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_neighbour_is_stopped_outside_busy_and_ends_on_close():
    neighbour = Neighbour()
    pid = neighbour.process.pid
    try:
        assert settles(pid, stopped=True)
        with neighbour.busy():
            assert settles(pid, stopped=False)
        assert settles(pid, stopped=True)
    finally:
        neighbour.close()
    assert neighbour.process.returncode is not None


def test_bench_loads_nothing_and_a_child_refuses_a_first_import_that_came_late():
    root = orders.ROOT
    code = "import sys, bench, bench.orders; print([m for m in bench.orders.HEAVY if m in sys.modules])"
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True)
    assert done.stdout.strip() == "[]", done.stderr
    late = "import numpy; from bench import orders; orders.main(['torch', 'json.tool'])"
    done = subprocess.run([sys.executable, "-c", late], cwd=root, capture_output=True, text=True)
    assert done.returncode != 0 and "numpy loaded before the first import (torch)" in done.stderr


def test_merge_pools_samples_and_lists_the_rest():
    children = [{"conv": {"direct": {"c1": [1.0, 2.0]}}, "tuning": 0.5, "chosen": {"c1": "direct"}},
                {"conv": {"direct": {"c1": [3.0]}}, "tuning": 0.7, "chosen": {"c1": "im2col"}}]
    assert orders.merge(children) == {"conv": {"direct": {"c1": [1.0, 2.0, 3.0]}}, "tuning": [0.5, 0.7],
                                      "chosen": {"c1": ["direct", "im2col"]}}


@pytest.mark.parametrize("bench, argv", [
    (nets, ["--models", "lenet5"]),                         # convalgos first, the --quick default
    (train, ["--models", "lenet5", "--orders", "numpy"]),
    (autotune_bench, [])])
def test_quick_runs_write_a_record_from_one_child_process(bench, argv, tmp_path, capsys):
    out = tmp_path / "record.md"
    bench.main(["--quick", "--out", str(out)] + argv)
    assert capsys.readouterr().out.count(" first, round ") == 1
    text = out.read_text()
    assert "fresh process" in text and ("numpy |" if "numpy" in argv else "convalgos |") in text
