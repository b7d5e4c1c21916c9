"""What ``check_algorithm`` found: per pass, what held on how many layers, and each failure's smallest layer
with the lines that reproduce it."""
from __future__ import annotations

from dataclasses import dataclass, field

from convalgos import ConvParams


@dataclass
class Counterexample:
    """The smallest layer hypothesis found for one failing check, and how to reproduce it."""

    op: str
    check: str
    layer: ConvParams | None
    seed: int
    message: str
    algorithm: str = "alg"               # the expression that names the algorithm in the reproducing lines
    note: str = ""                       # e.g. that a re-run did not reproduce it (flaky)

    @property
    def layer_line(self) -> str:
        """``p = convalgos.ConvParams(...)``: the layer, as Python."""
        return f"p = convalgos.{self.layer!r}"

    @property
    def run_line(self) -> str:
        """The pass on the layer's seeded arrays, through ``convalgos.run``."""
        return (f"convalgos.run({self.algorithm}, {self.op!r}, *convalgos.testing.operands(p, {self.op!r}, "
                f"seed={self.seed}), p)")

    @property
    def check_line(self) -> str:
        """The failed check on that one layer: raises the same error."""
        return (f"convalgos.testing.check_layer({self.algorithm}, {self.op!r}, p, seed={self.seed}, "
                f"checks=[{self.check!r}])")

    @property
    def call(self) -> str:
        """One line that reproduces the failure, after ``import convalgos, convalgos.testing``."""
        return f"{self.layer_line}; {self.check_line}"

    def describe(self) -> str:
        lines = [f"{self.op} {self.check}: {self.message}"]
        if self.note:
            lines.append(f"  ({self.note})")
        if self.layer is not None:
            lines += [f"  smallest failing layer: {self.layer} (seed {self.seed})", f"    {self.layer_line}",
                      f"    {self.run_line}", f"    {self.check_line}"]
        return "\n".join(lines)


@dataclass
class PassResult:
    """One pass: check -> outcome ("held", "not claimed", "FAILED", "not checked: why"), the layers the last
    hypothesis run checked (``examples``) and drew but saw refused (``refused``), and the failures."""

    op: str
    outcomes: dict = field(default_factory=dict)
    examples: int = 0
    refused: int = 0
    failures: list = field(default_factory=list)
    note: str = ""

    @property
    def ok(self) -> bool:
        return not self.failures and "FAILED" not in self.outcomes.values()

    def describe(self) -> str:
        drawn = self.examples + self.refused
        head = f"{self.op}: {self.examples} layers checked"
        if drawn:
            head += f", {self.refused} of {drawn} drawn refused by supports"
        lines = [head + (f" ({self.note})" if self.note else "")]
        lines += [f"  {check:<13} {outcome}" for check, outcome in self.outcomes.items()]
        return "\n".join(lines)


@dataclass
class CheckResult:
    """Every pass checked, by name."""

    algorithm: str
    passes: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(result.ok for result in self.passes.values())

    @property
    def failures(self) -> list:
        return [failure for result in self.passes.values() for failure in result.failures]

    def describe(self) -> str:
        lines = [f"{self.algorithm}:"] + [result.describe() for result in self.passes.values()]
        for failure in self.failures:
            lines.append("FAILED " + failure.describe())
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.describe()


class CheckFailure(AssertionError):
    """``check_algorithm`` found a property that does not hold: ``result`` has every pass, ``failures`` the
    shrunk counterexamples (the first is also ``counterexample``)."""

    def __init__(self, result: CheckResult):
        super().__init__(result.describe())
        self.result, self.failures = result, result.failures
        self.counterexample = self.failures[0] if self.failures else None
