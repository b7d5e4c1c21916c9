"""``check_algorithm``: every property of ``properties.py`` on the layers an algorithm supports, per pass.

For each pass the algorithm implements:

1. probe ``supports`` (``steering.py``) to learn which feature values it takes;
2. let hypothesis draw layers from those values and run every check on each (``measure_layer``); a drawn
   layer that is still refused is skipped and counted;
3. when a check fails, hypothesis shrinks the layer to the smallest that still fails; that check is marked
   FAILED with its counterexample, and the pass is drawn again without it, so each other check still says
   whether it held (once ``supports`` has failed, a layer whose run raises is skipped like a refused one).

The algorithm is any object with ``convalgos.Algorithm``'s interface (``name``, ``implements``, ``supports``,
``tolerance_of``, ``workspace_bytes``, ``deterministic`` and the passes): it need not be registered.
"""
from __future__ import annotations

from hypothesis import errors, given, reject
from hypothesis import seed as fixed_seed
from hypothesis import strategies as st

from convalgos import PASSES

from .errors import CheckError
from .profiles import kit_settings
from .properties import CHECKS, WORKSPACE_ALLOWANCE, describe_share, measure_layer
from .results import CheckFailure, CheckResult, Counterexample, PassResult
from .steering import probe, steered_layers

def check_algorithm(algorithm, passes=None, dtypes=("float32", "float64"), max_examples: int | None = None, *,
                    checks=CHECKS, constraints: dict | None = None, settings=None, seed: int | None = None,
                    allowance: int = WORKSPACE_ALLOWANCE, name: str = "alg") -> CheckResult:
    """Check ``algorithm`` on hypothesis-drawn layers it supports; return a ``CheckResult`` or raise
    ``CheckFailure`` (an AssertionError) carrying the smallest failing layer of each failed check.

    passes: the passes to check (default: every one it implements); dtypes: those drawn; max_examples: layers
    per pass (default: the profile's); checks: a subset of ``CHECKS``; constraints: ``layers()`` keywords
    that bound the space (e.g. ``{"kernel": 3}`` or ``{"max_size": 32}``); settings: a hypothesis profile
    name or ``settings`` (``profiles.py``); seed: fixes hypothesis's draws; allowance: bytes a run may
    allocate beyond its declared workspace; name: how the reproducing lines refer to the algorithm.
    """
    unknown = set(checks) - set(CHECKS)
    if unknown:
        raise ValueError(f"checks must be among {CHECKS}, got {sorted(unknown)}")
    if passes is None:
        passes = [op for op in PASSES if algorithm.implements(op)]
    elif isinstance(passes, str):
        passes = [passes]
    bad = [op for op in passes if op not in PASSES]
    if bad:
        raise ValueError(f"passes must be among {PASSES}, got {bad}")
    hypothesis_settings = kit_settings(settings, max_examples)
    result = CheckResult(getattr(algorithm, "name", repr(algorithm)))
    for op in passes:
        result.passes[op] = check_pass(algorithm, op, tuple(dtypes), [c for c in CHECKS if c in checks],
                                       dict(constraints or {}), hypothesis_settings, seed, allowance, name)
    if not result.ok:
        raise CheckFailure(result)
    return result


def check_pass(algorithm, op, dtypes, checks, constraints, hypothesis_settings, seed, allowance,
               name) -> PassResult:
    """One pass: probe, then hunt with every check, then again without each check that failed."""
    result = PassResult(op)
    if not algorithm.implements(op):
        result.note = "not implemented"
        return result
    found = probe(algorithm, op, dtypes, constraints)
    if not found.any_supported:
        result.outcomes = {check: "not checked: no probe layer supported" for check in checks}
        result.failures.append(Counterexample(op, "supports", None, 0, f"supports refused all {found.asked} probe "
                                              f"layers; pass constraints= (layers() keywords) that describe the "
                                              f"layers it takes", name))
        return result
    strategy = steered_layers(found, constraints)
    remaining = list(checks)
    while remaining:
        hunt = Hunt(algorithm, op, remaining, allowance)
        failure = hunt.run(strategy, hypothesis_settings, seed, name)
        if failure is None:
            result.examples, result.refused = hunt.examples, hunt.refused
            result.outcomes.update({check: hunt.outcome(check) for check in remaining})
            break
        result.failures.append(failure)
        if failure.layer is None:                   # nothing drawn was supported: nothing was checked
            result.outcomes.update({check: "not checked: no drawn layer ran" for check in remaining})
            break
        result.outcomes[failure.check] = "FAILED"
        remaining.remove(failure.check)
    if "supports" in checks and found.findings and result.outcomes.get("supports") != "FAILED":
        layer, error = found.findings[0]          # found by probing, where the steered draws do not go
        result.outcomes["supports"] = "FAILED"
        result.failures.append(Counterexample(op, "supports", layer, 0, error.message, name,
                                              note="found while probing supports; not shrunk"))
    result.outcomes = {check: result.outcomes[check] for check in CHECKS if check in result.outcomes}
    return result


class Hunt:
    """One hypothesis run of some checks on one pass, counting what it saw."""

    def __init__(self, algorithm, op: str, checks, allowance: int):
        self.algorithm, self.op, self.checks, self.allowance = algorithm, op, list(checks), allowance
        self.examples = self.refused = 0
        self.worst: dict = {}
        self.last = None                           # (layer, seed, CheckError) of the latest failing example

    def example(self, p, array_seed: int) -> None:
        try:
            shares = measure_layer(self.algorithm, self.op, p, array_seed, self.checks, self.allowance)
        except CheckError as error:
            if error.check not in self.checks:      # a check already reported, met again on this layer
                reject()
            self.last = (p, array_seed, error)
            raise
        if shares is None:
            self.refused += 1
            reject()
        self.examples += 1
        for check, share in shares.items():            # the largest share of its bound each check used
            if isinstance(share, str) or check not in self.worst:
                self.worst[check] = share
            else:
                self.worst[check] = max(share, self.worst[check])

    def outcome(self, check: str) -> str:
        if check not in self.worst:
            return "not checked: no layer ran"
        return describe_share(check, self.worst[check], worst=True)

    def run(self, strategy, hypothesis_settings, seed, name) -> Counterexample | None:
        """Run hypothesis; None when every check held, else the shrunk counterexample."""
        def example(p, array_seed):
            self.example(p, array_seed)

        test = hypothesis_settings(given(p=strategy, array_seed=st.integers(0, 2 ** 16 - 1))(example))
        if seed is not None:
            test = fixed_seed(seed)(test)
        note = ""
        try:
            test()
            return None
        except errors.Unsatisfiable:
            return Counterexample(self.op, "supports", None, 0, f"no drawn layer could be checked ({self.refused} "
                                  f"refused by supports, the others raised): pass constraints= to describe the "
                                  f"layers it takes", name)
        except errors.Flaky:
            note = "flaky: re-running this layer did not always fail, as a nondeterministic algorithm may"
        except CheckError:
            pass
        p, array_seed, error = self.last
        return Counterexample(self.op, error.check, p, array_seed, error.message, name, note)
