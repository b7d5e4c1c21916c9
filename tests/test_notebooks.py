"""Every notebook in notebooks/ executes without error (nbclient, a fresh python3 kernel per notebook), and
matches the py:percent source it is built from (notebooks/_build/, ``python notebooks/_build/build.py``).

Each runs from a temporary copy, so the committed outputs are not rewritten; the working directory is the
notebooks/ folder. Skipped cleanly when the notebook tools (the ``notebooks`` extra) are not installed, and a
notebook that needs a package that is missing (06 and 07 train on scikit-learn's digits, 07 a torch model, 08
runs the property tests of ``convalgos.testing`` on hypothesis) is skipped too.
"""
import importlib.util
import pathlib
import shutil

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("matplotlib")

FOLDER = pathlib.Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = sorted(FOLDER.glob("*.ipynb"))
CELL_TIMEOUT_S = 300
#: notebook -> the modules it needs beyond the notebook tools
NEEDS = {"06_training": ("sklearn",), "07_torch_model": ("torch", "sklearn"), "08_your_own_algorithm": ("hypothesis",)}


def _builder():
    spec = importlib.util.spec_from_file_location("notebook_build", FOLDER / "_build" / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_notebooks_exist():
    assert [p.name for p in NOTEBOOKS] == ["01_algorithms.ipynb", "02_benchmark_mode.ipynb",
                                           "03_shapes_not_values.ipynb", "04_changing_shapes.ipynb",
                                           "05_determinism.ipynb", "06_training.ipynb", "07_torch_model.ipynb",
                                           "08_your_own_algorithm.ipynb", "09_where_each_wins.ipynb"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_matches_its_source(path):
    built = _builder().build(FOLDER / "_build" / f"{path.stem}.py")
    saved = nbformat.read(path, as_version=4)
    assert [(c.cell_type, c.source) for c in saved.cells] == [(c.cell_type, c.source) for c in built.cells]


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
    client.execute()    # raises CellExecutionError, naming the cell, if any cell errors
    errors = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors
