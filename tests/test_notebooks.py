"""Every notebook in notebooks/ executes without error (nbclient, a fresh python3 kernel per notebook).

Each runs from a temporary copy, so the committed outputs are not rewritten; the working directory is the
notebooks/ folder. Skipped cleanly when the notebook tools (the ``notebooks`` extra) are not installed.
"""
import pathlib
import shutil

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("matplotlib")

NOTEBOOKS = sorted((pathlib.Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))
CELL_TIMEOUT_S = 300


def test_notebooks_exist():
    assert [p.name for p in NOTEBOOKS] == ["01_algorithms.ipynb", "02_benchmark_mode.ipynb",
                                           "03_shapes_not_values.ipynb", "04_changing_shapes.ipynb",
                                           "05_determinism.ipynb"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_executes(path, tmp_path, monkeypatch):
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
