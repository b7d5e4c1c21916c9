"""One way to measure: interleaved timed rounds, the median and its noise, the choice with its tie-break, and
the sampled check against the float64 reference. The tuner, ``bench/``, the CLI and the notebooks all time
through this module, so they measure the same way and report the same statistic (the median).

    >>> samples = interleaved({"a": run_a, "b": run_b}, rounds=7)      # name -> seconds of each timed run
    >>> {name: median(s) for name, s in samples.items()}

Why interleaved: on a shared machine the speed drifts by 10-20% over seconds. One run of each candidate per
round (the order rotated round to round) puts the drift on all of them alike; timing one candidate's runs back
to back puts it on one.
"""
from __future__ import annotations

import time

import numpy as np

from convalgos import ConvParams, reference

#: output rows per strip of the forward check.
CHECK_ROWS = 2


class Timer:
    """Times a call with a clock (``time.perf_counter`` by default; tests inject a fake one). A device may
    bring its own (the GPU's times between CUDA events); every timer has ``now()`` and ``time(fn)``."""

    def __init__(self, clock=time.perf_counter):
        self.clock = clock

    def now(self) -> float:
        return self.clock()

    def time(self, fn) -> float:
        start = self.clock()
        fn()
        return self.clock() - start


def rotate(names: list, time_one, still_active) -> int:
    """The one rotation loop: rounds over ``names``, each round calling ``time_one(name)`` once per name,
    starting one further along the list each round (so no name always runs first, after the same neighbour),
    until ``still_active(names, rounds done)`` returns an empty list; it returns the names the next round runs.
    Returns the number of rounds done. ``interleaved`` and the tuner's race both time through it."""
    done = 0
    while names:
        shift = done % len(names)
        for name in names[shift:] + names[:shift]:
            time_one(name)
        done += 1
        names = still_active(names, done)
    return done


def interleaved(calls: dict, rounds: int, *, timer=None, warmup: int = 1, min_seconds: float = 0.0) -> dict:
    """name -> seconds of each timed run of ``calls[name]()``.

    ``warmup`` untimed runs of each come first (JIT compilation, first-touch of buffers). Then at least
    ``rounds`` rounds (``rotate``), more while the timed rounds have lasted under ``min_seconds``.
    """
    timer = Timer() if timer is None else timer
    names = list(calls)
    for _ in range(warmup):
        for name in names:
            calls[name]()
    samples = {name: [] for name in names}
    start = timer.now()
    if rounds > 0 or min_seconds > 0:
        rotate(names, lambda name: samples[name].append(timer.time(calls[name])),
               lambda names, done: names if done < rounds or timer.now() - start < min_seconds else [])
    return samples


def median(samples) -> float:
    return float(np.median(np.asarray(samples, dtype=float)))


def noise(samples) -> float:
    """Relative uncertainty of the median of ``samples``: MAD / median / sqrt(n) (0 for fewer than 2)."""
    s = np.asarray(samples, dtype=float)
    if len(s) < 2:
        return 0.0
    med = np.median(s)
    if med <= 0:
        return 0.0
    return float(np.median(np.abs(s - med)) / med / np.sqrt(len(s)))


def without_spikes(samples, ratio: float, floor: float = float("inf")) -> list:
    """The runs that are not spikes: at most ``ratio`` times the fastest of ``samples`` and ``floor`` (say, a
    warm-up run, which is never faster than a clean run). On a shared machine noise only adds time (another
    process takes the core, a page fault, a cache flushed), so the fastest run is the floor of the true time
    and a run far above it was disturbed. Empty when every one of ``samples`` is a spike beside ``floor``."""
    low = min(min(samples, default=floor), floor)
    return [t for t in samples if t <= ratio * low]


def tied_with_fastest(samples: dict, tie_tolerance: float) -> list:
    """The names whose median is within the measured noise (at least ``tie_tolerance``) of the fastest median,
    fastest first."""
    medians = {name: median(s) for name, s in samples.items()}
    best = min(medians, key=medians.get)
    tied = [name for name, m in medians.items()
            if m <= medians[best] * (1 + max(tie_tolerance, noise(samples[name]), noise(samples[best])))]
    return sorted(tied, key=medians.get)


def choose(samples: dict, tie_tolerance: float, preference) -> tuple[str, list]:
    """(the choice, the names tied with the fastest). The fastest median wins; near-ties go to the smallest
    ``preference(name)`` (the tuner's: deterministic first, then the smaller workspace, the smaller error, the
    name), so the choice is stable run to run."""
    tied = tied_with_fastest(samples, tie_tolerance)
    return min(tied, key=preference), tied


# ---- the sampled reference check ------------------------------------------------------------------------------
def poison(out) -> None:
    """Fill a float output (NumPy or CuPy) with NaN before a checked run, so an element the run leaves unwritten
    shows (``ReferenceCheck.unwritten``) instead of inheriting what the previous candidate wrote there."""
    if out.dtype.kind == "f":
        out.fill(float("nan"))


def _ends(n: int) -> list:
    """The first and the last index of n (the one index when n is 1)."""
    return sorted({0, n - 1})


class ReferenceCheck:
    """Normwise error of one pass's result against the float64 reference, computed on a sample of it.

    The sample is a smaller layer of the same geometry (same stride, padding, dilation, kernel, full planes),
    cut where the pass's sums do not cross:

    - ``forward`` y[n, k]: the first and last image, group and output channel of a group, all input channels;
      then only strips of ``CHECK_ROWS`` output rows at the top, middle and bottom (full width, so every
      padding border is in them), each computed from the input rows it reads;
    - ``backward_data`` dx[n, c]: the first and last image, group and input channel of a group, all output
      channels;
    - ``backward_filter`` dw[k, c]: the first and last group, output and input channel of a group, all images
      (dw sums over them).

    A small layer is its own sample. The float64 reference of a whole VGG layer costs 0.2-0.8 s here (10-40
    runs of the fast algorithms); the sample costs a small fraction of that and holds every border and the
    channel remainders an algorithm's blocking leaves. What the sample does not hold is checked for the one
    fault that hides there, an element never written: the output is poisoned with NaN before the run
    (``poison``), and ``unwritten`` counts the NaN left anywhere in it, when the operands were finite.
    """

    def __init__(self, op: str, a, b, p: ConvParams):
        self.op = op
        self.finite = bool(np.isfinite(a).all() and np.isfinite(b).all())
        groups = _ends(p.groups)
        cin = range(p.Cg) if op == "forward" else _ends(p.Cg)
        cout = range(p.Kg) if op == "backward_data" else _ends(p.Kg)
        self.images = _ends(p.N) if op != "backward_filter" else list(range(p.N))
        self.channels = [g * p.Cg + c for g in groups for c in cin]        # x's and dx's channels
        self.outputs = [g * p.Kg + k for g in groups for k in cout]        # y's, dy's and w's channels
        self.local = list(cin)                                             # w's second axis
        sub = ConvParams.from_shapes((len(self.images), len(self.channels), p.H, p.W),
                                     (len(self.outputs), len(self.local), p.R, p.S), stride=p.stride,
                                     padding=p.padding, dilation=p.dilation, groups=len(groups), dtype=p.dtype)
        a, b = np.asarray(a), np.asarray(b)
        if op == "forward":
            x, w = a[self.images][:, self.channels], b[self.outputs][:, self.local]
            self.strips = _strips(sub.out_hw[0])
            self.ref = np.concatenate([_forward_rows(x, w, sub, lo, hi) for lo, hi in self.strips], axis=2)
        elif op == "backward_data":
            self.ref = reference.backward_data(a[self.images][:, self.outputs], b[self.outputs][:, self.local], sub)
        else:
            self.ref = reference.backward_filter(a[:, self.channels], b[:, self.outputs], sub)

    def sample(self, out) -> np.ndarray:
        """The part of a result of this pass that the reference was computed for."""
        out = np.asarray(out)
        if self.op == "forward":
            y = out[self.images][:, self.outputs]
            return np.concatenate([y[:, :, lo:hi] for lo, hi in self.strips], axis=2)
        if self.op == "backward_data":
            return out[self.images][:, self.channels]
        return out[self.outputs][:, self.local]

    def unwritten(self, out) -> int:
        """How many elements of a whole result are NaN although the operands were finite (0 when they were not):
        left unwritten after ``poison``, or NaN made from finite numbers."""
        return int(np.isnan(np.asarray(out)).sum()) if self.finite else 0

    def error(self, out) -> float:
        """max|sample - reference| / max|reference| (``reference.normwise_error``)."""
        return reference.normwise_error(self.sample(out), self.ref)


def _strips(Ho: int) -> list:
    """(first, end) output rows of the strips: top, middle and bottom, or all rows when they would cover half."""
    if 6 * CHECK_ROWS >= Ho:
        return [(0, Ho)]
    return [(s, s + CHECK_ROWS) for s in (0, Ho // 2 - CHECK_ROWS // 2, Ho - CHECK_ROWS)]


def _forward_rows(x, w, p: ConvParams, lo: int, hi: int) -> np.ndarray:
    """The float64 reference of output rows lo..hi-1: a layer over the input rows they read."""
    (top, _), (left, right) = p.padding
    first = lo * p.stride[0] - top                     # input row under kernel row 0 of output row lo
    last = (hi - 1) * p.stride[0] - top + p.kernel_extent[0]
    a, b = max(0, first), min(p.H, last)
    if b <= a:                                         # the rows read only padding
        return np.zeros((p.N, p.K, hi - lo, p.out_hw[1]))
    rows = ConvParams.from_shapes((p.N, p.C, b - a, p.W), w.shape, stride=p.stride, dilation=p.dilation,
                                  groups=p.groups, padding=((a - first, last - b), (left, right)), dtype=p.dtype)
    return reference.forward(x[:, :, a:b], w, rows)
