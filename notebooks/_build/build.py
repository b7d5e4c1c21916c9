"""Build the notebooks from their sources here, and execute them (outputs saved in the .ipynb).

Each ``notebooks/_build/NN_name.py`` is a py:percent script: a line ``# %%`` starts a code cell, a line
``# %% [markdown]`` a markdown cell whose lines are comments (``# `` is stripped). It becomes
``notebooks/NN_name.ipynb``; edit the source, not the .ipynb.

    python notebooks/_build/build.py                 # build and execute every notebook (what the records show)
    python notebooks/_build/build.py 02 06           # only those whose names start with 02 or 06
    python notebooks/_build/build.py --no-execute    # build without outputs (quick check of the sources)

Execution is nbclient's, as in ``tests/test_notebooks.py``: a fresh python3 kernel per notebook, run in
``notebooks/``, without ``AUTOTUNE_CACHE`` (a user's cache must not change what runs). The time each took is
printed; a cell that raises stops the build with the notebook named.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import sys
import time

import nbformat

HERE = pathlib.Path(__file__).resolve().parent
NOTEBOOKS = HERE.parent
CELL_TIMEOUT_S = 300


def cells(source: str) -> list:
    """The notebook cells of a py:percent script."""
    out, kind, lines = [], None, []

    def flush():
        text = "\n".join(lines).strip("\n")
        if kind is not None and text:
            out.append(nbformat.v4.new_markdown_cell(text) if kind == "markdown" else nbformat.v4.new_code_cell(text))

    for line in source.splitlines():
        if line.startswith("# %%"):
            flush()
            kind, lines = ("markdown" if "[markdown]" in line else "code"), []
        elif kind == "markdown":
            lines.append(line[2:] if line.startswith("# ") else line.lstrip("#"))
        elif kind == "code":
            lines.append(line)
    flush()
    return out


def build(source: pathlib.Path) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata.kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata.language_info = {"name": "python"}
    nb.cells = cells(source.read_text())
    return nb


def execute(nb: nbformat.NotebookNode) -> None:
    import nbclient
    os.environ.pop("AUTOTUNE_CACHE", None)
    nbclient.NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="name prefixes (e.g. 02); default: all")
    parser.add_argument("--no-execute", action="store_true", help="build the .ipynb without running it")
    args = parser.parse_args(argv)
    sources = [s for s in sorted(HERE.glob("[0-9][0-9]_*.py"))
               if not args.names or any(s.stem.startswith(n) for n in args.names)]
    if not sources:
        parser.error(f"no source in {HERE} matches {args.names}")
    for source in sources:
        nb = build(source)
        target = NOTEBOOKS / f"{source.stem}.ipynb"
        start = time.perf_counter()
        if not args.no_execute:
            print(f"{target.name}: executing ...", flush=True)
            execute(nb)
        nbformat.write(nb, target)
        print(f"{target.name}: {len(nb.cells)} cells" + ("" if args.no_execute else
              f", executed in {time.perf_counter() - start:.0f} s"), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
