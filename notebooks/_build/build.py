"""Build the notebooks from their sources here, execute them on a machine measured quiet, and store them.

The one command that re-makes every stored notebook (run it when nothing else runs on the machine):

    python notebooks/_build/build.py --execute --all

Each ``notebooks/_build/NN_name.py`` is a py:percent script: a line ``# %%`` starts a code cell, a line
``# %% [markdown]`` a markdown cell whose lines are comments (``# `` is stripped). It becomes
``notebooks/NN_name.ipynb``; edit the source, not the .ipynb. Its first code cell calls
``machine.describe()`` (notebooks/machine.py): the machine, the date and how quiet it was.

    python notebooks/_build/build.py                 # the same as --execute --all
    python notebooks/_build/build.py 02 06           # only those whose names start with 02 or 06
    python notebooks/_build/build.py --dry-run 05    # execute and measure, store nothing (a check while busy)
    python notebooks/_build/build.py --no-execute    # build without outputs (quick check of the sources)

Execution is nbclient's, as in ``tests/test_notebooks.py``: a fresh python3 kernel per notebook, run in
``notebooks/``, without ``AUTOTUNE_CACHE`` (a user's cache must not change what runs). Every run is guarded
(``guard.py``): the machine is probed before it and the kernel's run-queue wait read during it; outputs taken
under contention are not stored, and the run is retried (``--tries``, waiting up to ``--patience`` seconds
for quiet before each). A notebook refused keeps its old file, and the build exits 1 naming it. The time
each took is printed, and the total (the tests run them all: the set must stay under 4 minutes); a cell
that raises stops the build with the notebook named.
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


def execute(nb: nbformat.NotebookNode, watch=None) -> None:
    import nbclient
    os.environ.pop("AUTOTUNE_CACHE", None)
    client = nbclient.NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                                     resources={"metadata": {"path": str(NOTEBOOKS)}})
    if watch is not None:
        watch.attach(client)
    client.execute()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="name prefixes (e.g. 02); default: all")
    parser.add_argument("--all", action="store_true", help="every notebook (the default when no name is given)")
    parser.add_argument("--execute", action="store_true", help="execute under the guard (the default)")
    parser.add_argument("--no-execute", action="store_true", help="build the .ipynb without running it")
    parser.add_argument("--dry-run", action="store_true", help="execute and measure, but store nothing")
    parser.add_argument("--tries", type=int, default=3, help="runs per notebook before it is refused (3)")
    parser.add_argument("--patience", type=float, default=300,
                        help="seconds to wait for a quiet machine before each run (300)")
    parser.add_argument("--max-share", type=float, default=None,
                        help="the most run-queue wait (a share) that counts as quiet, before and during (guard.py: "
                             "0.05); the worst cell may wait twice that")
    args = parser.parse_args(argv)
    sources = [s for s in sorted(HERE.glob("[0-9][0-9]_*.py"))
               if args.all or not args.names or any(s.stem.startswith(n) for n in args.names)]
    if not sources:
        parser.error(f"no source in {HERE} matches {args.names}")
    sys.path.insert(0, str(HERE))
    import guard
    if args.max_share is not None:
        guard.MAX_SHARE, guard.MAX_CELL_SHARE = args.max_share, 2 * args.max_share
    refused, times = [], {}
    for source in sources:
        target = NOTEBOOKS / f"{source.stem}.ipynb"
        if args.no_execute:
            nb = build(source)
            nbformat.write(nb, target)
            print(f"{target.name}: {len(nb.cells)} cells (not executed)", flush=True)
            continue
        print(f"{target.name}: executing ...", flush=True)
        start = time.perf_counter()
        nb, measured = guard.guarded_run(lambda: build(source), execute, args.tries, args.patience,
                                         log=lambda line: print(line, flush=True))
        during = measured.get("during")
        if during:
            times[target.name] = during["seconds"]
            print(f"   {during['seconds']:.0f} s of cells ({time.perf_counter() - start:.0f} s with kernel start, "
                  f"probes and retries); before: probes waited {measured['before']['wait_share']:.1%}; during: "
                  f"other processes {during['others_cores']:.2f} cores, kernel waited {during['wait_share']:.1%} (worst "
                  f"cell {during['worst_cell']['share']:.1%}), "
                  f"load {during['load_min']:.2f}-{during['load_max']:.2f}", flush=True)
        if nb is None:
            refused.append(target.name)
            print(f"   REFUSED: taken under contention, {target.name} keeps its old outputs", flush=True)
        elif args.dry_run:
            print("   quiet; not stored (--dry-run)", flush=True)
        else:
            nbformat.write(nb, target)
            print(f"   stored ({len(nb.cells)} cells)", flush=True)
    if times:
        print(f"\n{sum(times.values()):.0f} s of cells in {len(times)} notebook(s) (the tests run them all; the "
              f"set must stay under 240 s, kernel starts included)")
    if refused:
        print("refused (contended; run again when the machine is quiet):", ", ".join(refused))
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main())
