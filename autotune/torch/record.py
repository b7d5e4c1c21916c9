"""What each converted layer keeps for ``report``: per pass, how many calls the dispatcher served and how many
torch's conv did (and why), and the last dispatched call's layer, by which the report finds its table entry."""
from __future__ import annotations

from dataclasses import dataclass, field

from convalgos import PASSES


@dataclass
class Call:
    """One dispatched call's layer, as the dispatcher saw it (after padding_mode's pad and unbatched views)."""

    x_shape: tuple
    w_shape: tuple
    stride: object
    padding: object
    dilation: object
    groups: int
    dtype: str
    deterministic: bool
    device: str


@dataclass
class PassRecord:
    """One pass of one layer: ``dispatched`` and ``by_torch`` calls, reason -> torch calls, the last call."""

    dispatched: int = 0
    by_torch: int = 0
    reasons: dict = field(default_factory=dict)
    call: Call | None = None


class LayerRecord:
    """The record of one layer (or of the functional form's calls, without a name). ``logged`` holds the
    reasons already logged, so a fallback is logged once per layer and reason."""

    def __init__(self, name: str = ""):
        self.name = name
        self.passes = {op: PassRecord() for op in PASSES}
        self.logged = set()

    def served(self, op: str, call: Call) -> None:
        record = self.passes[op]
        record.dispatched += 1
        record.call = call

    def fell_back(self, ops: tuple, reason: str) -> bool:
        """Count a call of passes ``ops`` that torch served; True the first time the layer falls back for this
        reason."""
        for op in ops:
            record = self.passes[op]
            record.by_torch += 1
            record.reasons[reason] = record.reasons.get(reason, 0) + 1
        first = reason not in self.logged
        self.logged.add(reason)
        return first
