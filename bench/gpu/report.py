"""The GPU check's report: a Markdown file written line by line as results arrive, flushed at every line, so a
crash (of a job, or of the whole run) leaves everything before it on disk. Only the parent writes it."""
from __future__ import annotations

import datetime
from pathlib import Path

PASS_NAMES = {"forward": "fwd", "backward_data": "bwd data", "backward_filter": "bwd filter"}


def ms(value) -> str:
    return "" if value is None else f"{value:.3f}"


def ratio(a, b) -> str:
    return f"{a / b:.2f}" if a and b else ""


class Report:
    """Appends to ``path`` (created afresh): ``line``, ``heading``, ``table`` (its header) and ``row``."""

    def __init__(self, path: Path, title: str):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path, self.file = path, open(path, "w")
        today = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        self.line(f"# {title}\n\nStarted {today}. Written as it runs: a section ends where the run did.")

    def line(self, text: str = "") -> None:
        self.file.write(text + "\n")
        self.file.flush()

    def heading(self, text: str) -> None:
        self.line(f"\n## {text}\n")

    def table(self, columns: list) -> None:
        self.line("| " + " | ".join(columns) + " |")
        self.line("|" + "---|" * len(columns))

    def row(self, cells: list) -> None:
        self.line("| " + " | ".join(str(c) for c in cells) + " |")

    def close(self) -> None:
        self.file.close()


def check_cell(result: dict | None) -> str:
    """A correctness cell: error and status, "-" for unsupported, the status alone where no error exists."""
    if result is None:
        return "not run"
    if result["status"] == "unsupported":
        return "-"
    if result.get("error") is None:
        return result["status"]
    cell = f"{result['error']:.1e} {result['status']}"
    if result.get("unwritten"):
        cell += f" ({result['unwritten']} NaN)"
    return cell


def timing_columns(names: list) -> list:
    return (["layer", "pass", "GFLOP"] + names + ["autotune", "cuDNN", "cuDNN benchmark", "autotune / cuDNN bm",
                                                   "autotune pick", "heuristic pick"])


def timing_cells(row: dict, names: list, cudnn: dict) -> list:
    """A timing row: ms per candidate ("-" where refused or failed), cuDNN off and on, the ratio, the picks."""
    key = (row["layer"], row["op"])
    off, on = cudnn.get(False, {}).get(key), cudnn.get(True, {}).get(key)
    cells = [row["layer"], PASS_NAMES[row["op"]], f"{row['gflop']:.1f}"]
    cells += [ms(row["ms"].get(n)) if n in row["ms"] else "-" for n in names + ["autotune"]]
    picks = row["picks"]
    return cells + [ms(off), ms(on), ratio(row["ms"].get("autotune"), on), picks.get("autotune", ""),
                    picks.get("heuristic", "")]
