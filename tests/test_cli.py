"""python -m autotune end to end, in a subprocess: output, --json (a file or stdout), --cache (a warm one tunes
nothing), paths checked before any work, errors that name the option, and what the summary may claim."""
import json
import os
import subprocess
import sys

import pytest

import convalgos
from autotune.__main__ import main
from autotune.profile import summary
from autotune.cache import cpu_model
from convalgos.arrays import cupy_available

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: distinct conv layers (ConvParams) of each model at any batch and input size.
DISTINCT_CONVS = {"lenet5": 2, "resnet20": 8}
#: small inputs that keep each run to seconds.
SIZES = {"lenet5": "32", "resnet20": "16"}


def run_cli(*args, timeout=240, cwd=None):
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("AUTOTUNE_CACHE", None)
    return subprocess.run([sys.executable, "-m", "autotune", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=cwd)


def refused(capsys, *args) -> str:
    """Run the CLI in this process on arguments it must refuse before any work: its stderr."""
    with pytest.raises(SystemExit) as stop:
        main(list(args))
    assert stop.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("model, batch", [("lenet5", 4), ("resnet20", 2)])
def test_cli_end_to_end_with_a_cold_then_warm_cache(tmp_path, model, batch):
    """A cold run tunes every distinct conv once; the warm run (same cache) tunes nothing, same choices."""
    cache, cold, warm = tmp_path / "cache.json", tmp_path / "cold.json", tmp_path / "warm.json"
    common = ["--model", model, "--batch", str(batch), "--size", SIZES[model], "--rounds", "1",
              "--cache", str(cache), "--benchmark-limit", "3"]
    first = run_cli(*common, "--json", str(cold))
    assert first.returncode == 0, first.stderr
    assert "forward pass, autotuned" in first.stdout and "best single algorithm" in first.stdout
    assert first.stdout.count("dispatch table") == 1                      # its header, once
    assert cpu_model() in first.stdout.splitlines()[0]                  # the header names the real device
    doc = json.loads(cold.read_text())
    assert len(doc["entries"]) == DISTINCT_CONVS[model]
    assert len({layer["shape"] for layer in doc["layers"]}) == DISTINCT_CONVS[model]
    assert doc["totals"]["keys_tuned"] == DISTINCT_CONVS[model]
    assert all(e.get("source") == "benchmark" for e in doc["entries"])
    assert sorted(os.listdir(tmp_path)) == ["cache.json", "cold.json"]        # no lock or temporary file

    second = run_cli(*common, "--json", str(warm))
    assert second.returncode == 0, second.stderr
    again = json.loads(warm.read_text())
    assert again["totals"]["keys_tuned"] == 0, second.stdout      # a warm cache times nothing
    assert again["totals"]["keys_reused"] == DISTINCT_CONVS[model]
    # the same choices, but for one made on runs that waited for a CPU: that is raced again once the machine is
    # quiet by design (``Tuner._rerace``), so it may become another algorithm
    settled = [i for i, e in enumerate(doc["entries"]) if not e.get("provisional")]
    assert [again["entries"][i].get("algo") for i in settled] == [doc["entries"][i].get("algo") for i in settled]


def test_no_benchmark_claims_no_tuning_json_to_stdout_and_plot(tmp_path):
    """--no-benchmark times nothing and says so; --json - writes JSON to stdout (the report to stderr)."""
    pytest.importorskip("matplotlib")
    png = tmp_path / "h.png"
    done = run_cli("--model", "lenet5", "--batch", "2", "--no-benchmark", "--rounds", "1", "--json", "-",
                   "--plot", str(png), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert len(doc["entries"]) == 2 and all(e.get("source") == "heuristic" for e in doc["entries"])
    assert doc["totals"]["keys_tuned"] == 0 and doc["totals"]["keys_by_source"] == {"heuristic": 2}
    first_pass = next(line for line in done.stderr.splitlines() if line.startswith("first pass"))
    assert "tuned" not in first_pass and "2 key(s) chosen by the heuristic" in first_pass
    assert "forward pass, autotuned" in done.stderr and os.listdir(tmp_path) == ["h.png"]   # no file named "-"
    assert png.stat().st_size > 1000


def test_workspace_limit_zero_runs_or_names_the_limit_not_the_input():
    done = run_cli("--model", "lenet5", "--workspace-limit", "0", "--rounds", "1", "--benchmark-limit", "1")
    assert "cannot run input" not in done.stderr
    assert done.returncode == 0 or "--workspace-limit 0" in done.stderr, done.stderr


def test_a_size_the_model_cannot_take_names_size_and_the_sizes_it_takes(capsys):
    err = refused(capsys, "--model", "lenet5", "--size", "36")
    assert "--size 36: lenet5 cannot take a 36x36 input" in err and "32-35" in err and "matmul" not in err


@pytest.mark.parametrize("option", ["--cache", "--json", "--plot"])
def test_paths_are_checked_before_any_work(tmp_path, capsys, option):
    if option == "--plot":
        pytest.importorskip("matplotlib")
    missing = tmp_path / "nowhere" / "f.json"
    assert f"{option} {missing}: its folder {missing.parent} does not exist" in refused(
        capsys, "--model", "lenet5", option, str(missing))
    assert f"{option} {tmp_path}: it is a directory" in refused(capsys, "--model", "lenet5", option, str(tmp_path))
    assert "not writable" in refused(capsys, option, f"/proc/autotune-cli-{os.getpid()}.json")


def test_a_cache_pointed_at_another_file_is_refused_and_the_file_kept(tmp_path, capsys):
    report = tmp_path / "report.json"
    report.write_text('{"model": "lenet5", "entries": []}')
    assert "not an autotune cache" in refused(capsys, "--model", "lenet5", "--cache", str(report))
    assert "same file" in refused(capsys, "--cache", str(tmp_path / "c.json"), "--json", str(tmp_path / "c.json"))
    assert report.read_text() == '{"model": "lenet5", "entries": []}' and sorted(os.listdir(tmp_path)) == [
        "report.json"]


@pytest.mark.skipif(cupy_available(), reason="a GPU is here: --device cuda runs")
def test_device_cuda_without_a_gpu_gives_the_reason(capsys):
    err = refused(capsys, "--device", "cuda")
    assert "--device cuda:" in err and ("CuPy" in err or "GPU" in err) and "not built yet" not in err


def test_speedup_line_compares_passes_that_differ():
    registry = {n: convalgos.ALGORITHMS[n] for n in ("direct", "im2col")}
    times = {"autotuned": 1.0, "direct": 3.0, "im2col": 0.79}       # lenet5: im2col chosen for every layer
    lines, totals = summary(times, {}, {}, 0.5, {"benchmark": 2, "reused": 0}, ["im2col", "im2col"],
                            registry=registry)
    text = "\n".join(lines)
    assert "same choice" in text and "speedup over the best single" not in text and "0.79x over" not in text
    assert totals["same_choice"] is True and "speedup_over_best_single" not in totals
    lines, totals = summary(times, {}, {}, 0.5, {"benchmark": 2, "reused": 0}, ["direct", "im2col"],
                            registry=registry)
    assert "speedup over the best single algorithm (im2col): 0.79x" in "\n".join(lines)
    assert totals["speedup_over_best_single"] == pytest.approx(0.79)


@pytest.mark.parametrize("args, message", [
    (["--batch", "0"], "--batch: must be an integer >= 1"),
    (["--model", "alexnet"], "unknown model 'alexnet'; known models: lenet5, resnet20, resnet18"),
    (["--size", "0x32"], "--size: must be H, HxW or CxHxW"),
    (["--model", "lenet5", "--size", "3x32x32"], "lenet5 takes 1 input channels"),
    (["--workspace-limit", "lots"], "must be a byte count"),
    (["--dtype", "int8"], "invalid choice: 'int8'"),
])
def test_bad_options_exit_nonzero_with_a_message(capsys, args, message):
    assert message in refused(capsys, *args)


def test_a_bad_option_in_a_real_process():
    done = run_cli("--batch", "0", timeout=60)
    assert done.returncode == 2 and "--batch: must be an integer >= 1" in done.stderr
