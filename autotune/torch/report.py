"""``report(model)``: what the dispatcher chose for each pass of each converted layer of a torch model, which
cuDNN's benchmark mode never shows (pytorch#18536).

Per layer (its name in ``model.named_modules()``) and pass: how many calls the dispatcher served and how many
torch's conv did (and why), and from the layer's tuner's dispatch table the entry of its last dispatched call:
the choice and how it was made (``benchmark``: measured; ``heuristic``: benchmark off; ``patience``), its median
time, and the runner-up with its time (``Entry.ranked[1]``: the next fastest when measured, the heuristic's
next otherwise, with no time). ``str(report)`` is a table; ``report.to_dict()`` the same as plain data.
"""
from __future__ import annotations

import autotune
from convalgos import ConvParams

from .module import Conv2d


def _params(call) -> ConvParams:
    return ConvParams.from_shapes(call.x_shape, call.w_shape, stride=call.stride, padding=call.padding,
                                  dilation=call.dilation, groups=call.groups, dtype=call.dtype)


def _entry(entries: list, call, op: str):
    """The table entry of pass ``op`` of ``call`` (the last stored where several keys match), or None."""
    p = _params(call)
    found = [e for e in entries if e.key.op == op and e.key.params == p and not e.key.prepared
             and e.key.deterministic == call.deterministic and e.key.device.split(":")[0] == call.device]
    return found[-1] if found else None


def _row(record, entry) -> dict:
    row = {"dispatched": record.dispatched, "by_torch": record.by_torch, "torch_reasons": dict(record.reasons),
           "source": None, "algorithm": None, "seconds": None, "runner_up": None, "runner_up_seconds": None}
    if entry is not None:
        runner = entry.ranked[1] if len(entry.ranked) > 1 else None
        row.update(source=entry.source, algorithm=entry.algo, seconds=entry.times.get(entry.algo),
                   runner_up=runner, runner_up_seconds=entry.times.get(runner))
    return row


class Report:
    """Rows (layer, pass, row dict) in model order; printable as a table, convertible to a dict."""

    def __init__(self, rows: list):
        self.rows = rows

    def to_dict(self) -> dict:
        """{"layers": {layer: {pass: row}}, "dispatched": calls, "by_torch": calls}."""
        layers = {}
        for layer, op, row in self.rows:
            layers.setdefault(layer, {})[op] = row
        return {"layers": layers, "dispatched": sum(r["dispatched"] for _, _, r in self.rows),
                "by_torch": sum(r["by_torch"] for _, _, r in self.rows)}

    def __str__(self) -> str:
        def ms(seconds):
            return "-" if seconds is None else f"{seconds * 1e3:.3f}"

        head = ("layer", "pass", "dispatched", "by torch", "chosen", "ms", "runner-up", "ms")
        cells = [head]
        for layer, op, r in self.rows:
            chosen = "-" if r["algorithm"] is None else f"{r['algorithm']} ({r['source']})"
            cells.append((layer, op, str(r["dispatched"]), str(r["by_torch"]), chosen, ms(r["seconds"]),
                          r["runner_up"] or "-", ms(r["runner_up_seconds"])))
        widths = [max(len(row[i]) for row in cells) for i in range(len(head))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
        totals = self.to_dict()
        lines.append(f"{totals['dispatched']} calls served by the dispatcher, {totals['by_torch']} by torch's conv")
        for layer, op, r in self.rows:
            for reason, calls in r["torch_reasons"].items():
                lines.append(f"  {layer} {op}: {calls} calls by torch: {reason}")
        return "\n".join(lines)

    __repr__ = __str__


def report(model) -> Report:
    """The report of every ``autotune.torch.Conv2d`` in ``model`` (a module or a converted layer)."""
    tables, rows = {}, []
    for name, m in model.named_modules():
        if not isinstance(m, Conv2d):
            continue
        tuner = autotune.default_tuner() if m.tuner is None else m.tuner
        if id(tuner) not in tables:
            tables[id(tuner)] = list(tuner.dispatch_table())
        for op, record in m.record.passes.items():
            entry = None if record.call is None else _entry(tables[id(tuner)], record.call, op)
            rows.append((name or type(m).__name__, op, _row(record, entry)))
    return Report(rows)
