"""Every notebook in notebooks/ executes without error (nbclient, a fresh python3 kernel per notebook), matches
the py:percent source it is built from (notebooks/_build/, ``python notebooks/_build/build.py``), prints the
header (the machine, the date, the quiet: notebooks/machine.py) and was stored by the build's guard from a run
measured quiet (notebooks/_build/guard.py). The guard's own decisions are tested on fake measurements.

Each notebook runs from a temporary copy, so the committed outputs are not rewritten; the working directory is
the notebooks/ folder. Each lesson's conclusion is checked inside the notebook, by asserts on the numbers it was
computed from: a notebook whose conclusion does not follow from its numbers fails here. Skipped cleanly when
the notebook tools (the ``notebooks`` extra) are not installed, and a notebook that needs a package that is
missing (06 and 07 train on scikit-learn's digits, 07 a torch model, 08 runs the property tests of
``convalgos.testing`` on hypothesis) is skipped too.
"""
import importlib.util
import pathlib
import shutil
import sys

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("matplotlib")

FOLDER = pathlib.Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = sorted(FOLDER.glob("[0-9][0-9]_*.ipynb"))
SOURCES = sorted((FOLDER / "_build").glob("[0-9][0-9]_*.py"))
CELL_TIMEOUT_S = 300
#: notebook -> the modules it needs beyond the notebook tools
NEEDS = {"06_training": ("sklearn",), "07_torch_model": ("torch", "sklearn"), "08_your_own_algorithm": ("hypothesis",)}
#: the course's first nine lessons; later ones are found by their names (NN_name.ipynb)
FIRST = ["01_algorithms", "02_benchmark_mode", "03_shapes_not_values", "04_changing_shapes", "05_determinism",
         "06_training", "07_torch_model", "08_your_own_algorithm", "09_where_each_wins"]


def _load(name):
    spec = importlib.util.spec_from_file_location(f"notebook_{name}", FOLDER / "_build" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _builder():
    return _load("build")


@pytest.fixture
def guard():
    global guard_reading
    module = _load("guard")                           # it imports machine.py from notebooks/
    guard_reading = module.Reading
    yield module
    sys.modules.pop("machine", None)


def test_notebooks_exist_one_per_source():
    assert [p.stem for p in NOTEBOOKS][:len(FIRST)] == FIRST
    assert [p.stem for p in NOTEBOOKS] == [s.stem for s in SOURCES]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_matches_its_source(path):
    built = _builder().build(FOLDER / "_build" / f"{path.stem}.py")
    saved = nbformat.read(path, as_version=4)
    assert [(c.cell_type, c.source) for c in saved.cells] == [(c.cell_type, c.source) for c in built.cells]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_prints_the_header_first(path):
    first_code = next(c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code")
    assert "machine.describe()" in first_code.source


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_stored_outputs_were_measured_quiet(path, guard):
    """The stored outputs come from the guarded build: measured quiet before and during the run, and the header
    cell shows what was measured during it (python notebooks/_build/build.py --execute --all)."""
    nb = nbformat.read(path, as_version=4)
    quiet = nb.metadata.get("quiet")
    assert quiet, f"{path.name} was not stored by the guarded build"
    assert quiet["before"]["wait_share"] <= quiet["max_share"]
    # the guard's own rule: other processes stayed off the cores; the kernel's threads waiting for each other
    # with nothing else running (a pool spinning beside another) is the notebook's own behaviour, not a neighbour
    assert guard.verdict(quiet["during"]) == "", quiet["during"]
    header = next(c for c in nb.cells if c.cell_type == "code")
    text = "".join(o.get("text", "") for o in header.outputs)
    assert "quiet:" in text and "during:" in text and "CONTENDED" not in text
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_executes(path, tmp_path, monkeypatch):
    for module in NEEDS.get(path.stem, ()):
        pytest.importorskip(module)
    copy = tmp_path / path.name
    shutil.copy(path, copy)
    monkeypatch.delenv("AUTOTUNE_CACHE", raising=False)    # a user's cache must not change what runs
    nb = nbformat.read(copy, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                                     resources={"metadata": {"path": str(path.parent)}})
    client.execute()    # raises CellExecutionError, naming the cell, if any cell errors (a lesson's assert too)
    errors = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors


# ---- the guard's decisions, on fake measurements ---------------------------------------------------------------
def _notebook():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# A lesson"),
                nbformat.v4.new_code_cell("import machine\nmachine.describe()"), nbformat.v4.new_code_cell("1")]
    return nb


def _fake_run(shares, others=0.5):
    """An execute() whose kernel waited the given share of its runnable time, one share per call, while other
    processes used ``others`` CPU seconds per cell (of 1 s)."""
    shares = list(shares)

    def execute(nb, watch):
        share = shares.pop(0)
        cpu, wait = int(1e9 * (1 - share)), int(1e9 * share)
        watch.readings = [guard_reading(None, 0, 0, 0.0, 0.0), guard_reading(1, cpu, wait, 1.0, cpu * 1e-9 + others),
                          guard_reading(2, 2 * cpu, 2 * wait, 2.0, 2 * (cpu * 1e-9 + others))]
        watch.loads = [0.1, 0.2, 0.1]
    return execute


def _quiet_probe(share):
    return lambda: {"wait_share": share, "probe_seconds": 0.5, "load": 0.1, "at": "12:00:00"}


def test_guard_stores_a_quiet_run_with_what_it_measured(guard, monkeypatch):
    monkeypatch.setattr(guard, "probe", _quiet_probe(0.01))
    nb, measured = guard.guarded_run(_notebook, _fake_run([0.02], others=0.01), tries=3, patience=0,
                                     log=lambda line: None)
    assert nb is not None and measured["during"]["wait_share"] == pytest.approx(0.02)
    assert nb.metadata["quiet"]["try"] == 1
    assert "during:" in nb.cells[1].outputs[-1]["text"] and "(2.0%" in nb.cells[1].outputs[-1]["text"]


def test_guard_retries_a_run_contended_during_it(guard, monkeypatch):
    monkeypatch.setattr(guard, "probe", _quiet_probe(0.01))
    lines = []
    nb, measured = guard.guarded_run(_notebook, _fake_run([0.30, 0.01], others=0.05), tries=3, patience=0,
                                     log=lines.append)
    assert nb is not None and nb.metadata["quiet"]["try"] == 2
    assert any("contended during the run" in line for line in lines)


def test_guard_refuses_after_its_tries(guard, monkeypatch):
    monkeypatch.setattr(guard, "probe", _quiet_probe(0.01))
    nb, measured = guard.guarded_run(_notebook, _fake_run([0.30, 0.20]), tries=2, patience=0, log=lambda line: None)
    assert nb is None and measured["during"]["wait_share"] == pytest.approx(0.20)


def test_guard_does_not_start_on_a_busy_machine(guard, monkeypatch):
    monkeypatch.setattr(guard, "probe", _quiet_probe(0.33))
    ran = []
    nb, measured = guard.guarded_run(_notebook, lambda nb, watch: ran.append(nb), tries=3, patience=0,
                                     log=lambda line: None)
    assert nb is None and not ran and measured["before"]["wait_share"] == 0.33


def test_guard_refuses_a_busy_neighbour_the_kernel_did_not_wait_for(guard, monkeypatch):
    monkeypatch.setattr(guard, "probe", _quiet_probe(0.01))
    nb, measured = guard.guarded_run(_notebook, _fake_run([0.0], others=0.5), tries=1, patience=0,
                                     log=lambda line: None)
    assert nb is None and measured["during"]["others_cores"] == pytest.approx(0.5)


def test_guard_keeps_a_wait_nothing_else_caused(guard, monkeypatch):
    """The kernel's own threads competing (nothing else ran): its behaviour on any machine, stored."""
    monkeypatch.setattr(guard, "probe", _quiet_probe(0.01))
    nb, measured = guard.guarded_run(_notebook, _fake_run([0.20], others=0.0), tries=1, patience=0,
                                     log=lambda line: None)
    assert nb is not None and measured["during"]["wait_share"] == pytest.approx(0.20)


def test_guard_judges_one_contended_cell(guard):
    watch = guard.Watch()
    R = guard.Reading
    watch.readings = [R(None, 0, 0, 0.0, 0.0), R(1, int(5e9), 0, 5.0, 5.0), R(2, int(5.6e9), int(0.4e9), 6.0, 5.65)]
    watch.loads = [0.1, 0.1, 0.1]
    during = watch.result()
    assert during["wait_share"] == pytest.approx(0.4 / 6.0, rel=1e-3)            # 6.7% over the run
    assert during["others_cores"] == pytest.approx(0.05 / 6.0, abs=1e-3)         # under the run's limits
    assert during["worst_cell"] == {"share": 0.4, "cell": 2, "others_cores": 0.05}
    assert guard.verdict(during) == "cell 2 waited 40.0% (at most 10%) while other processes used 0.05 cores"
