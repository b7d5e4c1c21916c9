"""The dispatch table: keys, entries (what was measured and chosen), the counters, and the readable report."""
from __future__ import annotations

from collections import namedtuple
from dataclasses import MISSING, asdict, dataclass, field, fields

from convalgos import PASSES, ConvParams

from .race.blocks import describe

#: the table's counters. ``passes``: pass -> PassInfo; ``layers``: layer -> LayerInfo (shapes.py); ``reraces``:
#: provisional entries raced again once the machine was quiet; ``provisional``: entries provisional now.
CacheInfo = namedtuple("CacheInfo", "hits misses entries tuning_seconds passes layers reraces provisional")
PassInfo = namedtuple("PassInfo", "hits misses entries tuning_seconds")
#: what ``Tuner.forward_choice`` answers: the algorithm object, the validated layer, the key's entry, and the
#: device that runs it (``Tuner.run_choice``).
Choice = namedtuple("Choice", "algorithm params entry device")

MiB = float(1 << 20)


@dataclass(frozen=True)
class Key:
    """Everything that changes the best algorithm: the layer (dtype included), the input's memory layout,
    the device, the deterministic flag, the thread count in use, the pass (``op``, one of
    ``convalgos.PASSES``: each pass of a layer is tuned on its own), and ``prepared``: the caller runs the
    pass on a weight prepared once (eval mode's ``Tuner.forward_choice(..., prepared=True)``), so candidates
    that prepare are timed without their weight transform, which is reported apart."""

    params: ConvParams
    layout: str = "contiguous"
    device: str = "cpu"
    deterministic: bool = False
    threads: int = 1
    op: str = "forward"
    prepared: bool = False

    def __hash__(self) -> int:
        """Computed once: a table hit hashes its key on every call."""
        try:
            return self.__dict__["_hash"]
        except KeyError:
            h = hash((self.params, self.layout, self.device, self.deterministic, self.threads, self.op,
                      self.prepared))
            object.__setattr__(self, "_hash", h)
            return h

    def to_dict(self) -> dict:
        d = {"params": asdict(self.params), "layout": self.layout, "device": self.device,
             "deterministic": self.deterministic, "threads": self.threads, "op": self.op}
        return {**d, "prepared": True} if self.prepared else d      # files of plain keys stay as they were

    @classmethod
    def from_dict(cls, d: dict) -> "Key":
        q = dict(d["params"])
        for name in ("stride", "dilation"):
            q[name] = tuple(int(v) for v in q[name])
        q["padding"] = tuple(tuple(int(v) for v in pair) for pair in q["padding"])
        op = str(d["op"])
        if op not in PASSES:
            raise ValueError(f"op must be one of {PASSES}, got {op!r}")
        return cls(ConvParams(**q), str(d["layout"]), str(d["device"]), bool(d["deterministic"]),
                   int(d["threads"]), op, bool(d.get("prepared", False)))

    def __str__(self) -> str:
        det = " deterministic" if self.deterministic else ""
        prepared = " (prepared weight)" if self.prepared else ""
        return f"{self.op}{prepared}: {self.params} | {self.layout} {self.device} threads={self.threads}{det}"


#: the report's columns after the name: (header, width).
COLUMNS = (("median ms", 11), ("kept", 6), ("retaken", 9), ("waited", 8), ("spikes", 8), ("warm-up ms", 12),
           ("JIT ms", 10), ("error", 10), ("workspace MiB", 15))
#: Entry fields left out of its dict when empty.
OPTIONAL = ("nonfinite", "jit", "retaken", "waited", "verdict", "provisional", "reraced", "mean_times", "blocks",
            "host_times", "gpu_times", "decided", "calls", "spent", "neighbours", "waits_kept")
#: fields of older files, read as: "contended" (the spike rule's mark) is a provisional mark; "confirmed" is gone.
LEGACY = {"contended": "provisional", "confirmed": None}
#: the columns of a GPU entry whose race measured host and GPU time apart (``race.py``).
SPLIT_COLUMNS = (("host ms", 10), ("GPU ms", 10))


@dataclass
class Entry:
    """One key's decision and the evidence for it.

    ``source``: "benchmark" (measured), "heuristic" (``rule`` names the rule that fired) or "patience" (a new
    shape of a layer past the patience limit: ``rule`` names the tuned shape whose choice it reuses).
    ``times``: name -> median seconds of its timed runs that were not spikes; ``runs``: how many timed runs;
    ``samples``: the seconds of each timed run, in order, spikes included; ``warmup``: the untimed run before
    the race (the first call, or a second one when the first was mostly JIT); ``jit``: seconds Numba spent
    compiling, or loading from its cache, the kernels of the first call and the weight's preparation
    (``jit.py``; in no other time); ``spikes``: runs recognised as spikes (slower than ``spike_ratio`` times the
    candidate's own fastest run, its warm-up included); ``errors``: normwise error against the float64
    reference (sampled); ``workspace``: bytes each candidate needs; ``skipped``: name -> why it was not timed,
    not eligible, or failed; ``abandoned``: name -> why its timing stopped early; ``tied``: the candidates
    whose medians were within the noise of the fastest (the choice among them is the tie-break's); ``ranked``:
    the candidates in order of preference, where a call falls back when the choice fails; ``fresh_output``:
    whether the call had no ``out=`` (its timed runs then wrote into one buffer kept for the race: the call's
    own allocation costs the same for every algorithm and is not timed) or the runs wrote into the caller's
    buffer;
    ``prepare_seconds`` and ``prepare_bytes``: for a ``prepared`` key, what preparing each candidate's weight
    took once (seconds, not in ``times``) and holds (bytes); ``nonfinite``: name -> how its NaN and Inf
    entries compared with the reference's ("same", "spread" or "wrong: ...", ``measure.judge``), for the
    candidates whose result or reference had any; ``host_times`` and ``gpu_times``: name -> median host seconds
    to issue a call and median GPU seconds of its kernels, where the race measured them apart (the GPU), and
    ``decided``: which of the two made the choice (``race/rounds.py``: ``times`` are then the larger of the
    two, or the GPU time in graph mode);
    ``retaken``: name -> runs set aside because its threads waited for a CPU (``race/rounds.py``); ``waited``:
    name -> seconds its threads waited per second of its runs, retaken ones included; ``neighbours``: the share
    of the race's samples before which another process had a task runnable (None where the platform cannot tell:
    ``race/provisional.py``); ``waits_kept``: name -> why its runs were judged waits and all, not retaken
    (``race/rounds.py``); ``verdict``: the judge's shoot-out of the top two (``race/judge.py``: ratio,
    interval, pairs, outcome), empty when the runner-up was out of reach; ``provisional``: why the choice rests
    on runs that waited ("" when it does not: ``race/provisional.py``); ``reraced``: how many times this key
    was raced again once the machine was quiet;
    ``calls`` and ``spent``: name -> how many calls it made while tuned (its checked call, a second one after
    JIT, the untimed call before each short timed one, the runs retaken, the blocks) and their seconds, the
    JIT call's apart;
    ``mean_times``: the race was contended most of the time, so ``times`` are means, waits included: per call
    over the blocks of back-to-back calls for the three it ran so (``race/blocks.py``), of every run taken for
    the others, not medians of clean runs; ``blocks``: name -> [blocks run, the mean's standard error] of those.
    """

    key: Key
    algo: str
    source: str
    rule: str = ""
    times: dict = field(default_factory=dict)
    runs: dict = field(default_factory=dict)
    samples: dict = field(default_factory=dict)
    warmup: dict = field(default_factory=dict)
    spikes: dict = field(default_factory=dict)
    errors: dict = field(default_factory=dict)
    workspace: dict = field(default_factory=dict)
    skipped: dict = field(default_factory=dict)
    abandoned: dict = field(default_factory=dict)
    tied: list = field(default_factory=list)
    ranked: list = field(default_factory=list)
    fresh_output: bool = True
    tuning_seconds: float = 0.0
    prepare_seconds: dict = field(default_factory=dict)
    prepare_bytes: dict = field(default_factory=dict)
    nonfinite: dict = field(default_factory=dict)
    jit: dict = field(default_factory=dict)
    retaken: dict = field(default_factory=dict)
    waited: dict = field(default_factory=dict)
    verdict: dict = field(default_factory=dict)
    provisional: str = ""
    reraced: int = 0
    mean_times: bool = False
    blocks: dict = field(default_factory=dict)
    host_times: dict = field(default_factory=dict)
    gpu_times: dict = field(default_factory=dict)
    decided: str = ""
    calls: dict = field(default_factory=dict)
    spent: dict = field(default_factory=dict)
    neighbours: float | None = None
    waits_kept: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["key"] = self.key.to_dict()
        for name in OPTIONAL:
            if d[name] == DEFAULTS[name]:
                del d[name]           # files without them stay as they were
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Entry":
        d = dict(d)
        d["key"] = Key.from_dict(d["key"])
        for old, new in LEGACY.items():
            value = d.pop(old, None)
            if new and value:
                d[new] = value
        return cls(**d)

    def speedup_over(self, name: str):
        """How many times faster the chosen algorithm ran than ``name`` (None unless both were timed)."""
        if name == self.algo or name not in self.times or self.algo not in self.times:
            return None
        return self.times[name] / self.times[self.algo]

    def _times_lines(self) -> list:
        """The candidates' columns, the name column as wide as the longest name (``winograd_fused_4x4 *``)."""
        names = sorted(self.times, key=self.times.get)
        marks = {n: " *" if n == self.algo else (" =" if n in self.tied else "") for n in names}
        width = max([len("algorithm")] + [len(n + marks[n]) for n in names]) + 2
        columns = ((("mean ms", 11),) if self.mean_times else COLUMNS[:1]) + COLUMNS[1:] + (
            SPLIT_COLUMNS if self.gpu_times else ())
        lines = [f"    {'algorithm':<{width}}" + "".join(f"{h:>{w}}" for h, w in columns)]
        for name in names:
            jit = f"{self.jit[name] * 1e3:.1f}" if name in self.jit else "-"
            waited = f"{self.waited[name]:.0%}" if name in self.waited else "-"
            values = (f"{self.times[name] * 1e3:.3f}", str(self.runs.get(name, 0)), str(self.retaken.get(name, 0)),
                      waited, str(self.spikes.get(name, 0)), f"{self.warmup.get(name, 0) * 1e3:.1f}", jit,
                      f"{self.errors.get(name, float('nan')):.1e}", f"{self.workspace.get(name, 0) / MiB:.1f}")
            if self.gpu_times:
                values += tuple(f"{t[name] * 1e3:.3f}" if name in t else "-" for t in (self.host_times, self.gpu_times))
            lines.append(f"    {name + marks[name]:<{width}}" + "".join(f"{v:>{w}}" for v, (_, w) in
                                                                     zip(values, columns)))
        return lines

    def report(self) -> str:
        lines = [str(self.key)]
        if self.source != "benchmark":
            lines.append(f"  {self.source} rule {self.rule!r}: {self.algo}")
        else:
            gains = [f"{s:.2f}x over {n}" for n in ("direct", "im2col") if (s := self.speedup_over(n))]
            jit = f" (JIT {sum(self.jit.values()):.3f} s)" if self.jit else ""
            lines.append(f"  benchmark: {self.algo}" + (f" ({', '.join(gains)})" if gains else "")
                         + f"; tuned in {self.tuning_seconds:.3f} s{jit}, ranked by rule {self.rule!r}")
            if self.provisional:
                lines.append(f"  PROVISIONAL: {self.provisional}; to be raced again once the machine is quiet")
            if self.reraced:
                lines.append(f"  raced again {self.reraced} time(s) once the machine was quiet"
                             + ("" if self.provisional else "; its runs no longer waited"))
            if self.verdict:
                v = self.verdict
                close = "CLOSE CALL: " if v["outcome"] == "close call" else ""
                lines.append(f"  {close}shoot-out {v['second']} / {v['first']} = {v['ratio']:.3f} "
                             f"[{v['low']:.3f}, {v['high']:.3f}] over {v['pairs']} paired rounds: {v['outcome']} "
                             f"(tie band +-{v['band']:.0%})")
            if len(self.tied) > 1:
                lines.append(f"  a tie within the noise: {', '.join(self.tied)}; {self.algo} chosen by the "
                             f"tie-break (deterministic, then smaller workspace, smaller error, name)")
            output = ("each writing into one output kept for the race (the call allocates its own, untimed)"
                      if self.fresh_output else "each writing into the caller's out= buffer")
            if self.mean_times:
                lines.append(f"  times: mean cost per call, waits included (a neighbour was there most of the time: "
                             f"the cost under it), in blocks of back-to-back calls for the three fastest, of every "
                             f"run for the others, the pool awake, {output}")
                if self.blocks:
                    lines.append("  " + describe(self.blocks, self.times))
            else:
                lines.append(f"  times: medians of interleaved runs, the pool awake, less spikes and runs that waited "
                             f"for a CPU (retaken: set aside for waiting; waited: seconds waited per second run), "
                             f"{output}")
            if self.decided:
                lines.append("  a run's time: the larger of its host time (issuing the launches) and its GPU time "
                             "(kernels, between CUDA events), or the GPU time alone in graph mode; decided by "
                             + self.decided)
            lines.append("  warm-up: the run before the race (a second one where JIT was most of the first); "
                         "JIT: Numba compiling or loading the first call's kernels; neither is in the medians")
            lines += self._times_lines()
            lines += [f"    {n}: all {k} timed runs were spikes beside its warm-up ({self.warmup.get(n, 0) * 1e3:.1f} "
                      f"ms), so its median is of all of them" for n, k in self.spikes.items() if k == self.runs.get(n)]
            if self.prepare_seconds:
                lines.append("  prepared once per weight (not in the times): " + "; ".join(
                    f"{n} {self.prepare_seconds[n] * 1e3:.3f} ms, {self.prepare_bytes.get(n, 0) / MiB:.2f} MiB"
                    for n in self.prepare_seconds))
            lines += _nonfinite_lines(self.nonfinite)
            for name, why in self.abandoned.items():
                lines.append(f"    {name}: abandoned, {why}")
            for name, why in self.waits_kept.items():
                lines.append(f"    {name}: judged on its runs, waits and all, not retaken ({why})")
        for name, why in self.skipped.items():
            lines.append(f"    {name}: skipped, {why}")
        return "\n".join(lines)


#: each field's value when a tuning left it unset (an ``OPTIONAL`` field so is not written to files)
DEFAULTS = {f.name: f.default if f.default is not MISSING else f.default_factory() for f in fields(Entry)
            if f.name in OPTIONAL}


def _nonfinite_lines(nonfinite: dict) -> list:
    """Where the operands held NaN or Inf: which candidates kept the reference's NaN/Inf entries, which spread
    them further (accepted: ``measure.judge`` says why)."""
    kinds = {"same": "at the reference's entries", "spread": "spread over their tile or image (accepted)"}
    lines = [f"  NaN/Inf {kinds[k]}: {', '.join(n for n, v in nonfinite.items() if v == k)}"
             for k in kinds if k in nonfinite.values()]
    return lines


class DispatchTable:
    """A snapshot of a Tuner's entries: iterable, indexable by Key, and printable as the report."""

    def __init__(self, entries: list, info: CacheInfo, notes: list):
        self.entries, self.info, self.notes = list(entries), info, list(notes)

    def __iter__(self):
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def __getitem__(self, key: Key) -> Entry:
        for entry in self.entries:
            if entry.key == key:
                return entry
        raise KeyError(key)

    def to_dict(self) -> dict:
        info = self.info._asdict()
        info["passes"] = {op: i._asdict() for op, i in self.info.passes.items()}
        info["layers"] = {layer: i._asdict() for layer, i in self.info.layers.items()}
        return {"entries": [e.to_dict() for e in self.entries], "info": info, "notes": self.notes}

    def __str__(self) -> str:
        i = self.info
        head = (f"dispatch table: {i.entries} entries; {i.hits} hits, {i.misses} misses, "
                f"{i.tuning_seconds:.3f} s tuning")
        passes = "; ".join(f"{op} {p.entries} entries, {p.misses} misses" for op, p in i.passes.items()
                           if p.entries or p.misses)
        lines = [head] + ([f"  per pass: {passes}"] if passes else [])
        if i.provisional or i.reraces:
            lines.append(f"  {i.provisional} provisional (chosen on runs that waited for a CPU), {i.reraces} raced "
                         f"again once the machine was quiet")
        lines += [f"  {layer}: {li.shapes} input shapes tuned in {li.seconds:.3f} s" for layer, li in i.layers.items()
                  if li.shapes > 1]
        lines += [f"  {n}" for n in self.notes]
        return "\n\n".join(["\n".join(lines)] + [e.report() for e in self.entries])
