"""python -m autotune end to end, in a subprocess: output, --json, --cache (a warm one tunes nothing), errors."""
import json
import os
import subprocess
import sys

import pytest

#: distinct conv layers (ConvParams) of each model at any batch and input size.
DISTINCT_CONVS = {"lenet5": 2, "resnet20": 8}
#: small inputs that keep each run to seconds.
SIZES = {"lenet5": "32", "resnet20": "16"}


def run_cli(*args, timeout=240):
    env = dict(os.environ, AUTOTUNE_CACHE="")
    env.pop("AUTOTUNE_CACHE")
    return subprocess.run([sys.executable, "-m", "autotune", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


@pytest.mark.parametrize("model, batch", [("lenet5", 4), ("resnet20", 2)])
def test_cli_end_to_end_with_a_cold_then_warm_cache(tmp_path, model, batch):
    """A cold run tunes every distinct conv once; the warm run (same cache) tunes nothing, same choices."""
    cache, cold, warm = tmp_path / "cache.json", tmp_path / "cold.json", tmp_path / "warm.json"
    common = ["--model", model, "--batch", str(batch), "--size", SIZES[model], "--rounds", "1",
              "--cache", str(cache)]
    first = run_cli(*common, "--json", str(cold))
    assert first.returncode == 0, first.stderr
    assert "forward pass, autotuned" in first.stdout and "speedup over the best single algorithm" in first.stdout
    doc = json.loads(cold.read_text())
    assert len(doc["entries"]) == DISTINCT_CONVS[model]
    assert len({layer["shape"] for layer in doc["layers"]}) == DISTINCT_CONVS[model]
    assert doc["totals"]["keys_tuned"] == DISTINCT_CONVS[model]
    assert all(e.get("source") == "benchmark" for e in doc["entries"])
    assert cache.exists()

    second = run_cli(*common, "--json", str(warm))
    assert second.returncode == 0, second.stderr
    again = json.loads(warm.read_text())
    assert again["totals"]["keys_tuned"] == 0, second.stdout      # a warm cache times nothing
    assert [e.get("algo") for e in again["entries"]] == [e.get("algo") for e in doc["entries"]]


def test_cli_without_cache_heuristic_only_and_plot(tmp_path):
    pytest.importorskip("matplotlib")
    out, png = tmp_path / "h.json", tmp_path / "h.png"
    done = run_cli("--model", "lenet5", "--batch", "2", "--no-benchmark", "--rounds", "1", "--json", str(out),
                   "--plot", str(png))
    assert done.returncode == 0, done.stderr
    doc = json.loads(out.read_text())
    assert len(doc["entries"]) == 2 and all(e.get("source") == "heuristic" for e in doc["entries"])
    assert png.stat().st_size > 1000


@pytest.mark.parametrize("args, message", [
    (["--batch", "0"], "--batch: must be an integer >= 1"),
    (["--model", "alexnet"], "unknown model 'alexnet'; known models: lenet5, resnet20, resnet18"),
    (["--device", "cuda"], "--device cuda:"),
    (["--size", "0x32"], "--size: must be H, HxW or CxHxW"),
    (["--model", "lenet5", "--size", "3x32x32"], "lenet5 takes 1 input channels"),
    (["--workspace-limit", "lots"], "must be a byte count"),
    (["--dtype", "int8"], "invalid choice: 'int8'"),
])
def test_bad_options_exit_nonzero_with_a_message(args, message):
    done = run_cli(*args, timeout=60)
    assert done.returncode == 2
    assert message in done.stderr
