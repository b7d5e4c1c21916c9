"""bench.train_passes end to end on one pass and one algorithm, one round: the record names the machine and the
clock, says it is not a step's time, gives every layer's time beside torch's, a weighted sum per net and the page
faults per call, and with --orders one record of every first import. Timings are never asserted."""
import pytest

pytest.importorskip("torch")


def test_one_round_writes_a_record_with_every_layer_and_the_sums(tmp_path, monkeypatch):
    import convalgos  # noqa: F401 (first, as the bench does)
    import numba
    import torch
    from bench import train_passes
    threads = numba.get_num_threads()                 # this process's counts, left as they are
    monkeypatch.delenv("NUMBA_NUM_THREADS", raising=False)       # main sets it for its own children: restored
    torch_threads = torch.get_num_threads()
    out = tmp_path / "passes.md"
    train_passes.main(["--passes", "backward_filter", "--algorithms", "direct", "--rounds", "1", "--threads",
                       str(threads), "--out", str(out)])
    torch.set_num_threads(torch_threads)
    text = out.read_text()
    assert "Machine: " in text and "; clock: " in text and "load average before" in text
    assert "## backward_filter, ResNet-20 b32" in text and "## backward_filter, ResNet-18 b1" in text
    rows = [line for line in text.splitlines() if line.startswith("| C64 8px |")]
    assert len(rows) == 1 and rows[0].count("|") == 6                 # layer, count, direct, torch, best / torch
    assert text.count("| **summed** |") == 2
    assert "not what a training step pays" in text and "Minor page faults per timed call" in text


def test_orders_run_each_first_import_in_a_fresh_process_into_one_record(tmp_path):
    from bench import train_passes
    out = tmp_path / "orders.md"
    train_passes.main(["--passes", "backward_filter", "--algorithms", "direct", "--rounds", "1", "--threads", "1",
                       "--orders", "numpy,torch", "--out", str(out)])
    text = out.read_text()
    assert "| pass, net | numpy first | torch first |" in text
    assert text.count("| backward_filter, ResNet-20 b32 | ") == 1
    assert "## numpy imported first" in text and "## torch imported first" in text
    assert "numpy imported first; Python" in text and "torch imported first; Python" in text
    with pytest.raises(SystemExit, match="--orders must name"):
        train_passes.main(["--orders", "scipy", "--out", str(out)])
