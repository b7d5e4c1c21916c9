"""Heuristic ranking of algorithms, from rules kept as data (``heuristics.json``), per device and per pass.

The rules are written by ``python -m bench.heuristics``, which times every algorithm on a few layers of each
layer class and records, per class, the algorithms from fastest to slowest. The file holds, per device kind
("cpu", "cuda") and per pass, a list of rules::

    {"devices": {"cpu": {"forward": [rule, ...], "backward_data": [...], "backward_filter": [...]}}}

    rule = {"name": "3x3 stride 1, wide", "when": {"kernel": [3, 3], "stride": [1, 1], "min_channels": 64},
            "order": ["winograd_4x4", "im2col", ...], "score": {"winograd_4x4": 1.0, ...},
            "closest": {"winograd_4x4": 1.0, "im2col": 1.4, ...},
            "layers": [{"at": [3136, 64, 64], "ratios": {"winograd_4x4": 1.0, "im2col": 2.9, ...}}, ...]}

``score`` is the geometric mean over the class's representative layers of an algorithm's time / the layer's
best time (what ``order`` sorts by); ``closest`` the smallest of those ratios (what the tuner prunes by,
``slowdowns``); ``layers`` each representative layer's ratios and its GEMM's sizes (``gemm_sizes``), by which a
layer near one of them is pruned instead.

``when`` compares features of the layer (``features`` below): ``feature: value`` must be equal,
``min_feature`` / ``max_feature`` bound it (inclusive). The first rule whose ``when`` holds fires; an empty
``when`` always holds (the default rule, kept last). Algorithms the rule does not name (one the user
registered: ``convalgos.register``) rank after the named ones, fewest FLOPs first, and the rule's name
returned says so (``UNMEASURED``): a measured order is trusted over a FLOP count, which is what ranks them.
Where the file has no rules for a device and pass (the GPU, until it is measured), the algorithms rank by their
own FLOP count for the layer, fewest first, and the rule's name says so; where the file has a seed for the
device (``"seeds": {"cuda": {"flops_per_second", "bytes_per_second"}}``: a datasheet's peak and memory
bandwidth, not a measurement), by an estimate from FLOPs and workspace instead,

    time = FLOPs / flops_per_second + 2 x workspace bytes / bytes_per_second    (the workspace written, then read)

and the rule's name says that too. The seed also picks the implicit GEMM's tile shape (``implicit_gemm_<M>x<N>``,
one registry entry per shape) from the layer's GEMM: each shape's estimate is multiplied by

    slowdown = padding x (multiprocessors / blocks, at least 1) x (4 / multiply-adds per shared-memory load)

(its tiles' padding of the M x N result, the multiprocessors its grid leaves idle, and its register tile's reuse:
8x8 does 4 multiply-adds per load, the textbook ``implicit_gemm`` 0.5), the shapes' slowdowns over the best one
are named in the rule, and ``slowdowns`` returns them, so the tuner prunes a shape the seed expects to lose by
``ESTIMATE_MARGIN`` x ``prune_ratio`` (6x) or more, as it prunes measured losers at ``prune_ratio`` (2x).
``{"rules": [...]}`` (no "devices") is the same rules for every device and pass.

A pass run on a prepared weight (eval mode: the weight's transform is made once, not timed) has its own rules
under ``"<pass> prepared"`` ("forward prepared"), measured that way: Winograd and FFT rank higher there.
Where a device has none, the pass's plain rules apply.
"""
from __future__ import annotations

import json
import math
import os
import warnings

from convalgos import ConvParams

DEFAULT_PATH = os.path.join(os.path.dirname(__file__), "heuristics.json")
#: joins a rule's name and the algorithms its measurements do not hold, in the rule name ``rank`` returns.
UNMEASURED = "; not in its measurements, after them by fewest FLOPs: "
#: the textbook implicit GEMM's tiling, as (BLOCK_M, BLOCK_N, THREAD_M, THREAD_N): 16 x 16 threads, one result each
TEXTBOOK_TILING = (16, 16, 1, 1)
#: multiply-adds per shared-memory load of an 8x8 register tile: the seed's best reuse (slowdown 1)
BEST_REUSE = 4.0
#: a seed's estimate (a datasheet's peak, not a measurement) prunes only this many times further behind than a
#: measured slowdown does (``estimated``): with the tuner's prune_ratio of 2, a tile shape estimated 6x behind
ESTIMATE_MARGIN = 3.0
#: a rule's representative layer within this many octaves of a layer's GEMM sizes (``gemm_sizes``: each size's
#: |log2| ratio, summed) is near it: the tuner prunes by the near layers' measurements (``slowdowns``)
NEAR_OCTAVES = 2.0


def features(p: ConvParams) -> dict:
    """The layer as the quantities rules may test."""
    Ho, Wo = p.out_hw
    return {"kernel": [p.R, p.S], "stride": list(p.stride), "dilation": list(p.dilation),
            "depthwise": p.is_depthwise, "grouped": p.groups > 1, "channels": min(p.Cg, p.Kg),
            "kernel_size": max(p.R, p.S), "stride_size": max(p.stride), "dilation_size": max(p.dilation),
            "pixels": Ho * Wo, "batch": p.N}


def gemm_sizes(p: ConvParams) -> tuple[int, int, int]:
    """(output pixels N*Ho*Wo, input channels per group, output channels per group): the sizes of the product
    every algorithm computes in its own form (im2col's GEMM, Winograd's per-tile products, direct's loops), what
    makes two layers of one class alike or not: a 3x3 layer of 64 channels at batch 32 on 8 px is near one at
    batch 1 on 56 px (2048 against 3136 pixels) and far from one of 256 channels on 14 px."""
    Ho, Wo = p.out_hw
    return p.N * Ho * Wo, p.Cg, p.Kg


def octaves(a, b) -> float:
    """How far apart two layers' ``gemm_sizes`` are: the sum of |log2| of their ratios."""
    return sum(abs(math.log2(x / y)) for x, y in zip(a, b))


def matches(when: dict, f: dict) -> bool:
    for name, value in when.items():
        if name.startswith("min_"):
            ok = f[name[4:]] >= value
        elif name.startswith("max_"):
            ok = f[name[4:]] <= value
        else:
            ok = f[name] == value
        if not ok:
            return False
    return True


class Heuristics:
    """Ranks algorithm names for a layer, a pass and a device kind; ``rank`` also says which rule fired."""

    def __init__(self, data: dict):
        self.data = data
        self.devices = data.get("devices")
        self.everywhere = list(data.get("rules", []))
        #: rule name -> the seed's tile-shape slowdowns it named (``rank``), for ``slowdowns``
        self._seeded_slowdowns: dict[str, dict[str, float]] = {}

    @classmethod
    def from_file(cls, path: str = DEFAULT_PATH) -> "Heuristics":
        """The rules in ``path``; none (FLOP ranking), with a warning, if it cannot be read."""
        try:
            with open(path) as f:
                data = json.load(f)
            if not isinstance(data.get("devices"), dict):
                raise ValueError("no 'devices' mapping")
            return cls(data)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            warnings.warn(f"heuristics {path} not used ({e}); ranking by FLOPs")
            return cls({"rules": []})

    def rules(self, op: str = "forward", device: str = "cpu", prepared: bool = False) -> list:
        """The rules for pass ``op`` on a device of kind ``device`` (empty where nothing was measured); with
        ``prepared``, those measured on prepared weights where there are some."""
        if self.devices is None:
            return self.everywhere
        passes = self.devices.get(device, {})
        measured = passes.get(f"{op} prepared") if prepared else None
        return list(measured or passes.get(op, []))

    def seed(self, device: str):
        """The device's seed (``flops_per_second``, ``bytes_per_second``), or None."""
        return (self.data.get("seeds") or {}).get(device)

    def rank(self, p: ConvParams, names, op: str = "forward", device: str = "cpu", flops=None,
             prepared: bool = False, workspace=None) -> tuple[list, str]:
        """``names`` ordered best first by the first matching rule, and that rule's name. With no rule for the
        device and pass: by the seed's estimate from ``flops`` and ``workspace`` (name -> bytes) where the
        device has a seed, else by ``flops`` (name -> FLOPs) when given, else as given."""
        names, f = list(names), features(p)
        for rule in self.rules(op, device, prepared):
            if matches(rule.get("when", {}), f):
                order = {name: i for i, name in enumerate(rule["order"])}
                unmeasured = sorted((n for n in names if n not in order),
                                    key=lambda n: (0 if flops is None else flops[n], names.index(n)))
                measured = sorted((n for n in names if n in order), key=order.get)
                why = (UNMEASURED + ", ".join(unmeasured)) if unmeasured and flops is not None else ""
                return measured + unmeasured, rule["name"] + why
        if flops is None:
            return names, "registration order"
        why = "no rule matched" if self.rules(op, device, prepared) else f"no measured rules for {device} {op}"
        seed = self.seed(device)
        if seed is not None and workspace is not None:
            fps, bps = seed["flops_per_second"], seed["bytes_per_second"]
            tiles = tile_slowdowns(p, op, names, seed.get("multiprocessors", 1))
            cost = {n: flops[n] / fps * tiles.get(n, 1.0) + 2 * workspace.get(n, 0) / bps for n in names}
            rule = (f"seeded by FLOPs and workspace, not measured: least FLOPs / {fps:.3g} per s + 2 x workspace "
                    f"bytes / {bps:.3g} per s first ({why})")
            if tiles:
                best = min(tiles.values())
                relative = {n: tiles[n] / best for n in tiles}
                chosen = min(tiles, key=lambda n: (tiles[n], names.index(n)))
                rule += (f"; implicit GEMM shape {chosen} for this layer's GEMM, the others expected "
                         + ", ".join(f"{n} {relative[n]:.1f}x" for n in tiles if n != chosen) + " its time")
                self._seeded_slowdowns[rule] = relative
            return sorted(names, key=lambda n: (cost[n], names.index(n))), rule
        return sorted(names, key=lambda n: (flops[n], names.index(n))), f"fewest FLOPs first ({why})"

    def estimated(self, rule_name: str) -> bool:
        """Whether ``slowdowns`` of this rule are the seed's estimates, not measurements (``ESTIMATE_MARGIN``)."""
        return rule_name in self._seeded_slowdowns

    def near_layers(self, rule_name: str, p: ConvParams | None, op: str = "forward", device: str = "cpu",
                    prepared: bool = False) -> list:
        """The rule's representative layers within ``NEAR_OCTAVES`` of ``p`` (``gemm_sizes``), as recorded
        (``at``, ``ratios``); none without ``p`` or where the rule records no layers."""
        if p is None:
            return []
        here = gemm_sizes(p)
        layers = self.rule_named(rule_name, op, device, prepared).get("layers", [])
        return [one for one in layers if octaves(one["at"], here) <= NEAR_OCTAVES]

    def rule_named(self, rule_name: str, op: str = "forward", device: str = "cpu", prepared: bool = False) -> dict:
        """The rule called ``rule_name`` (as ``rank`` returned it) for the pass and device; {} if none."""
        rule_name = rule_name.split(UNMEASURED)[0]
        return next((r for r in self.rules(op, device, prepared) if r["name"] == rule_name), {})

    def slowdowns(self, rule_name: str, names, op: str = "forward", device: str = "cpu",
                  prepared: bool = False, p: ConvParams | None = None) -> dict:
        """name -> how much slower than the best of ``names`` the rule's measurements found it (where measured),
        what the tuner prunes by: its ``closest`` (the smallest time / best time over the class's layers: how near
        the best it ever came) where the rule records one, else its ``score`` (the geometric mean), over the
        smallest among ``names``: what a workspace limit or the deterministic flag left is measured against
        itself, so the nearest of it is never pruned. The closest is the safe one to prune by: a mean over a few
        layers can hide the one where it won, and one that never came within ``prune_ratio`` of the best on any
        layer of the class is not worth a call.

        Given the layer ``p``, the closest is taken over the class's layers near it (``near_layers``) where there
        are any: a class spans layers unlike each other (3x3 at 64-512 channels, batch 1 or 32, 7-56 px), and an
        algorithm that came near the best on one of them may be 6x behind on another. Measured here (2026-12-05,
        AMD EPYC): on ResNet-20's C64 8px batch-32 layer ``winograd_2x2``, ``winograd_6x6`` and ``im2col`` ran
        6.1-6.6x the best; within 1.9x of the best on some layer of the class, none was pruned, and their checked
        calls cost about 20x the choice's time of the tuning's 51x. The class's 56 px layer (3136 output pixels
        against 2048, the same channels) is near it and prunes them: 21x (``bench.regret``'s layers, 10 warm
        tunings each, interleaved: median 52x -> 34.5x, regret unchanged). An algorithm the near layers did not
        run (it does not support them) keeps the class's closest."""
        if rule_name in self._seeded_slowdowns:
            seeded = {n: s for n, s in self._seeded_slowdowns[rule_name].items() if n in names}
            best = min(seeded.values(), default=1.0)
            return {n: s / best for n, s in seeded.items()}
        rule = self.rule_named(rule_name, op, device, prepared)
        if "closest" in rule:
            near = self.near_layers(rule_name, p, op, device, prepared)
            closest = {n: min((one["ratios"][n] for one in near if n in one["ratios"]), default=rule["closest"][n])
                       for n in names if n in rule["closest"]}
            best = min(closest.values(), default=1.0)
            return {n: c / best for n, c in closest.items()}
        score = {n: rule.get("score", {})[n] for n in names if n in rule.get("score", {})}
        best = min(score.values(), default=1.0)
        return {n: s / best for n, s in score.items()}


def tile_slowdowns(p: ConvParams, op: str, names, multiprocessors: int) -> dict:
    """name -> the seed's slowdown of each implicit GEMM tile shape among ``names`` on pass ``op`` of ``p``
    (module docstring); empty when ``names`` holds none. Asks the GPU registry for each shape's tiling and grid."""
    if not any(n.startswith("implicit_gemm") for n in names):
        return {}
    from convalgos import cuda
    out = {}
    for name in names:
        algorithm, (M, N, _) = cuda.ALGORITHMS.get(name), cuda.implicit_gemm_shape(p, op)
        if name == "implicit_gemm":
            block_m, block_n, thread_m, thread_n = TEXTBOOK_TILING
            blocks = p.groups * -(-M // block_m) * -(-N // block_n)
        elif name.startswith("implicit_gemm_") and hasattr(algorithm, "gpu_tiling"):
            tiling = algorithm.gpu_tiling
            block_m, block_n, thread_m, thread_n = tiling.BLOCK_M, tiling.BLOCK_N, tiling.THREAD_M, tiling.THREAD_N
            blocks_x, blocks_y, splits = algorithm.grid(p, op, tiling)
            blocks = blocks_x * blocks_y * splits
        else:
            continue
        padding = (-(-M // block_m) * block_m * -(-N // block_n) * block_n) / max(1, M * N)
        idle = max(1.0, multiprocessors / blocks)
        reuse = thread_m * thread_n / (thread_m + thread_n)
        out[name] = padding * idle * BEST_REUSE / reuse
    return out
