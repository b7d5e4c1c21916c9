"""Steering: draw only layers an algorithm supports, so that a narrow algorithm is tested on many layers.

Drawing from the whole space and skipping what ``supports`` refuses wastes the examples: a 3x3, stride-1,
dilation-1 algorithm accepts about 1% of ``layers()``, so 100 examples test it on about one layer (a planted
"ignores dilation" bug in such an algorithm passed 100 examples and was found at 1000).

So the kit first asks ``supports`` about small probe layers, one feature value at a time: is there any probe
layer with a 5-row kernel (or stride 2 across, or groups 3, or asymmetric padding, or float16) that the
algorithm accepts? An accepted probe marks all of its values as allowed. It asks about the simplest layer and
every layer one feature away from it (22 probes: all a broad algorithm needs), then, for each value still
unseen, the layers with that value one feature away from the simplest or from an accepted probe (a 3x3 kernel
is two features from 1x1), then 64 random layers with that value; a value none of them accepts is refused.
``layers()`` then draws each feature from its allowed values only. Where the algorithm's limits are not one
feature at a time (say 3x3 at stride 1 or 1x1 at any stride), some drawn layers are still refused;
``check_algorithm`` counts them and reports how many drawn layers reached the algorithm.

Features the caller fixes (``constraints``, e.g. ``kernel=3``) are probed at that value only; features
constrained by a strategy are not steered. The probe also finds refusals without a reason and a ``supports``
that raises, with the probe layer that showed it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
import random

from hypothesis import strategies as st

from convalgos import ConvParams

from .errors import CheckError
from .runs import ask_supports
from .strategies import GROUPS, as_pair, layers

#: probe paddings by kind: what steering learns is whether any, symmetric and asymmetric padding is taken.
PADDING_KINDS = {"none": 0, "symmetric": 1, "asymmetric": ((0, 1), (1, 0))}
#: accepted probe layers whose neighbours are probed (the first ones found).
MAX_BASES = 4
#: random probe layers tried per feature value that no neighbour of an accepted layer had.
RANDOM_PROBES = 64


@dataclass
class Probe:
    """What probing learnt about one pass: the allowed values per feature, a supported layer, the
    ``supports`` findings (probe layer, CheckError) and how many probe layers were asked."""

    allowed: dict = field(default_factory=dict)
    example: ConvParams | None = None
    findings: list = field(default_factory=list)
    asked: int = 0

    @property
    def any_supported(self) -> bool:
        return self.example is not None


def fixed_value(constraints: dict, name: str):
    """A constraint given as a plain value (not a strategy), else None."""
    value = constraints.get(name)
    return None if value is None or isinstance(value, st.SearchStrategy) else value


def candidates(constraints: dict, dtypes) -> dict[str, list]:
    """Feature -> the values probed, simplest first (a fixed constraint: its value only)."""
    max_kernel = constraints.get("max_kernel", 5)
    values = {"dtype": list(dtypes), "groups": list(GROUPS),
              "kernel_h": list(range(1, max_kernel + 1)), "kernel_w": list(range(1, max_kernel + 1)),
              "stride_h": [1, 2, 3], "stride_w": [1, 2, 3], "dilation_h": [1, 2], "dilation_w": [1, 2],
              "padding": list(PADDING_KINDS)}
    for name in ("dtype", "groups"):
        if fixed_value(constraints, name) is not None:
            values[name] = [fixed_value(constraints, name)]
    for name in ("kernel", "stride", "dilation"):
        if fixed_value(constraints, name) is not None:
            values[f"{name}_h"], values[f"{name}_w"] = ([v] for v in as_pair(fixed_value(constraints, name)))
    if fixed_value(constraints, "padding") is not None:
        values["padding"] = ["fixed"]
    return values


def probe_layer(values: dict, constraints: dict) -> ConvParams | None:
    """A small valid layer with these feature values (None where the combination is not a layer)."""
    groups = values["groups"]
    g, Cg = (2, 1) if groups == "depthwise" else (groups, 2)
    C = fixed_value(constraints, "in_channels") or g * Cg
    K = fixed_value(constraints, "out_channels") or g * 2
    R, S = values["kernel_h"], values["kernel_w"]
    dilation = (values["dilation_h"], values["dilation_w"])
    padding = fixed_value(constraints, "padding") if values["padding"] == "fixed" else PADDING_KINDS[
        values["padding"]]
    size = fixed_value(constraints, "size")
    H, W = as_pair(size) if size is not None else (dilation[0] * (R - 1) + 3, dilation[1] * (S - 1) + 3)
    try:
        return ConvParams.from_shapes((fixed_value(constraints, "batch") or 1, C, H, W), (K, C // g, R, S),
                                      stride=(values["stride_h"], values["stride_w"]), padding=padding,
                                      dilation=dilation, groups=g, dtype=values["dtype"])
    except (ValueError, TypeError):
        return None


class Prober:
    """Asks ``supports`` about probe layers, each at most once, and keeps what it learnt in a ``Probe``."""

    def __init__(self, algorithm, op: str, values: dict, constraints: dict):
        self.algorithm, self.op, self.values, self.constraints = algorithm, op, values, constraints
        self.names = list(values)
        self.result = Probe(allowed={name: set() for name in self.names})
        self.seen: set = set()
        self.bases: list = []                      # accepted probe points, the first MAX_BASES of them

    def visit(self, point: tuple) -> None:
        if point in self.seen:
            return
        self.seen.add(point)
        features = dict(zip(self.names, point))
        p = probe_layer(features, self.constraints)
        if p is None:
            return
        self.result.asked += 1
        try:
            support = ask_supports(self.algorithm, p, self.op)
        except CheckError as error:
            self.result.findings.append((p, error))
            return
        if support:
            self.result.example = self.result.example or p
            if len(self.bases) < MAX_BASES:
                self.bases.append(point)
            for name, value in features.items():
                self.result.allowed[name].add(value)

    def changes(self, point: tuple, fixed: int | None = None):
        """Every point one feature away from ``point`` (leaving feature number ``fixed`` alone)."""
        for i, name in enumerate(self.names):
            if i != fixed:
                for value in self.values[name]:
                    if value != point[i]:
                        yield point[:i] + (value,) + point[i + 1:]

    def unknown(self):
        """(feature number, value) of every value no accepted probe has had yet."""
        return [(i, value) for i, name in enumerate(self.names) for value in self.values[name]
                if value not in self.result.allowed[name]]

    def run(self, rng) -> Probe:
        start = tuple(self.values[name][0] for name in self.names)       # the simplest layer
        for point in [start, *self.changes(start)]:
            self.visit(point)
        for i, value in self.unknown():              # two features away from the simplest, or one from a base
            for base in [start, *self.bases]:
                moved = base[:i] + (value,) + base[i + 1:]
                for point in [moved, *self.changes(moved, fixed=i)]:
                    self.visit(point)
        for i, value in self.unknown():              # anywhere: a random sample of the grid with that value
            for _ in range(RANDOM_PROBES):
                point = tuple(value if j == i else rng.choice(self.values[name]) for j, name in enumerate(self.names))
                self.visit(point)
        self.result.allowed = {name: [v for v in self.values[name] if v in self.result.allowed[name]]
                               for name in self.names}
        return self.result


def probe(algorithm, op: str, dtypes, constraints: dict) -> Probe:
    """Ask ``supports`` about probe layers near the simplest one and near each accepted one, then at random,
    until every feature value is known allowed (some probe with it is accepted) or taken as refused."""
    return Prober(algorithm, op, candidates(constraints, dtypes), constraints).run(random.Random(0))


def steered_layers(found: Probe, constraints: dict):
    """``layers(**constraints)`` with every unconstrained feature drawn from its allowed values only."""
    allowed, steer = found.allowed, dict(constraints)         # allowed values are simplest first
    one_of = st.sampled_from
    if constraints.get("dtype") is None:
        steer["dtype"] = one_of(allowed["dtype"])
    if constraints.get("groups") is None:
        steer["groups"] = one_of(allowed["groups"])
    for name in ("kernel", "stride", "dilation"):
        if constraints.get(name) is None:
            steer[name] = st.tuples(one_of(allowed[f"{name}_h"]), one_of(allowed[f"{name}_w"]))
    if constraints.get("padding") is None and "asymmetric" not in allowed["padding"]:
        side = st.integers(0, 2)
        steer["padding"] = (st.one_of(side, st.tuples(side, side), st.just("valid"))
                            if "symmetric" in allowed["padding"] else st.just("valid"))
    return layers(**steer)
