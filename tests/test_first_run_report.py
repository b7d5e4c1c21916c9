"""The first-run report, with fake algorithms and a fake clock (no timing asserted): Numba's compiling or
loading of kernels (JIT) is measured apart and kept out of the race's numbers, and the report's columns and
headers hold long names, one reason per kind of layer, one header, torch inside the summary."""
import re

import pytest

import convalgos
from autotune.profile import grouped_reasons, layer_lines, summary
from autotune.table import Entry, Key
from autotune_fakes import FakeClock, arrays, fakes, tuned


def test_jit_is_measured_apart_and_a_first_call_that_compiled_is_warmed_up_again():
    clock = FakeClock()
    algos = fakes(clock, compiles=(1e-3, {"jit": 15.0}), loads=(2e-3, {"jit": 1e-4}), plain=3e-3)
    entry = tuned(clock, algos)
    assert entry.jit == {"compiles": pytest.approx(15.0), "loads": pytest.approx(1e-4)}
    # compiles: its first call (15 s of JIT) was followed by a second call, compiled: its warm-up and, nothing
    # seen adding to it (no page fault, no wait), the race's first sample
    assert entry.warmup["compiles"] == pytest.approx(1e-3)
    assert algos["compiles"].calls == entry.runs["compiles"] + 2       # the JIT call, the runs, the call itself
    assert entry.calls["compiles"] == entry.runs["compiles"] + 1        # all but the user's call
    assert entry.samples["compiles"] == pytest.approx([1e-3] * entry.runs["compiles"])
    # loads: a little JIT (loading from the cache) is JIT all the same: warmed up again, the JIT out of it
    assert entry.warmup["loads"] == pytest.approx(2e-3) and algos["loads"].calls == entry.runs["loads"] + 1
    assert entry.algo == "compiles" and not entry.spikes and "plain" not in entry.jit
    report = entry.report()
    assert "(JIT 15.000 s)" in report.splitlines()[1]                     # the tuning time says what was JIT
    header, rows = table_rows(report)
    assert header[7:11] == ["warm-up", "ms", "JIT", "ms"]
    assert rows["compiles *"][6] == "15000.0" and rows["plain"][6] == "-"
    assert rows["compiles *"][5] == "1.0"                                 # warm-up ms: after compilation


def test_an_entry_saved_without_jit_or_nonfinite_loads_and_one_with_them_round_trips():
    clock = FakeClock()
    entry = tuned(clock, fakes(clock, compiles=(1e-3, {"jit": 2.0}), plain=3e-3))
    d = entry.to_dict()
    assert Entry.from_dict(d).jit == entry.jit and "nonfinite" not in d
    del d["jit"]
    assert Entry.from_dict(d).jit == {}


def table_rows(report: str):
    """(the header's words, name -> the cells of its row) of an entry's times table, checking that every
    cell ends where its header ends (right-aligned columns) and that no name runs into the next cell."""
    lines = report.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("algorithm"))
    header = lines[start]
    ends = [m.end() for m in re.finditer(r"\S+( \S+)?(?=\s{2,}|$)", header)][1:]   # "median ms", "runs", ...
    rows = {}
    for line in lines[start + 1:]:
        if not line.startswith("    ") or line.startswith("     ") or ":" in line:
            break
        cells = [line[:ends[0] - 11].strip()] + [line[:end].split()[-1] for end in ends]
        assert all(line[end - 1] != " " and (end == len(line) or line[end] == " ") for end in ends), line
        assert line[len(cells[0]) + 4:len(cells[0]) + 6] == "  ", line          # two spaces after the name
        rows[cells[0]] = cells[1:]
    return header.split(), rows


def test_long_names_keep_the_columns():
    clock = FakeClock()
    entry = tuned(clock, fakes(clock, winograd_fused_4x4=1e-3, a_much_longer_algorithm_name=1.05e-3, d=2e-3))
    _, rows = table_rows(entry.report())
    assert set(rows) == {"winograd_fused_4x4 *", "a_much_longer_algorithm_name", "d"}
    assert all(len(cells) == 9 for cells in rows.values())


def test_layer_lines_keep_their_columns_with_long_names():
    x, w = arrays()
    p = convalgos.ConvParams.from_arrays(x, w)
    entry = Entry(Key(p), "winograd_fused_4x4_long", "benchmark", times={"winograd_fused_4x4_long": 1e-3})
    lines = layer_lines([("layer1.0.conv1", p), ("a.layer.with.a.very.long.name.conv2", p)], {p: entry})
    starts = [[m.start() for m in re.finditer(r"(?<=\s)\S", line)][:3] for line in lines]
    assert lines[0].split()[:3] == ["layer", "shape", "chosen"]
    assert starts[1][-2:] == starts[2][-2:]            # the shape and choice columns start where they did above
    assert all("winograd_fused_4x4_long " in line for line in lines[1:])


def test_grouped_reasons_give_each_kind_of_layer_its_own():
    reasons = ["wino needs a 3x3 kernel, got 7x7"] + ["wino needs a 3x3 kernel, got 1x1"] * 3 + [
        "wino needs stride 1, got (2, 2)"] * 3
    assert grouped_reasons("wino", reasons) == ("needs a 3x3 kernel (4 layers: got 7x7 or 1x1); "
                                                "needs stride 1 (3 layers: got (2, 2))")
    assert grouped_reasons("dw", [f"dw needs groups == C, got C={c}" for c in (3, 64, 128, 256)]) == (
        "needs groups == C, got C=3 or C=64 or 2 other(s)")


def test_summary_columns_reasons_and_torch_inside_the_comparison():
    registry = {n: convalgos.ALGORITHMS[n] for n in ("direct", "winograd_fused_4x4", "im2col")}
    times = {"autotuned": 0.010, "direct": 0.011, "im2col": 0.02, "torch": 0.012}
    na = {"winograd_fused_4x4": ["winograd_fused_4x4 needs a 3x3 kernel, got 7x7"] +
          ["winograd_fused_4x4 needs stride 1, got (2, 2)"] * 3}
    lines, totals = summary(times, na, {}, 50.0, {"benchmark": 11}, ["direct", "im2col"], registry=registry,
                            jit_s=45.0)
    assert lines[0].startswith("first pass: 50.00 s (of which JIT 45.00 s")
    rows = lines[2:6]
    assert [r.split()[0:2] for r in rows] == [["forced", "direct"], ["forced", "winograd_fused_4x4"],
                                             ["forced", "im2col"], ["torch", "conv2d"]]
    ms = [r.index(" ms") for r in rows if " ms" in r]
    assert len(set(ms)) == 1 and rows[1].index("n/a") + 3 == ms[0]        # numbers, n/a and torch aligned
    assert "(unsupported on 4 layer(s): needs a 3x3 kernel (1 layer: got 7x7); needs stride 1 (3 layers" in rows[1]
    assert rows[3].endswith("(1.20x autotuned)")
    assert lines[6:] == ["speedup over the best single algorithm (direct): 1.10x", "speedup over torch's conv2d: 1.20x"]
    assert totals["jit_seconds"] == 45.0
