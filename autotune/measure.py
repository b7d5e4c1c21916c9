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

import math
import random
import time
from typing import NamedTuple

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
    """The one rotation loop: rounds over ``names``, each round calling ``time_one(name)`` once per name, the
    first round in the list's order and each later one in a fresh order (a shuffle, seeded: the same every run),
    until ``still_active(names, rounds done)`` returns an empty list; it returns the names the next round runs.
    Returns the number of rounds done. ``interleaved`` and the tuner's race both time through it.

    Why shuffled: what runs just before a call can slow it (another pool's threads still spinning, caches
    flushed), and a rotation keeps every name behind the same neighbour. Measured: in a training step timed
    beside torch's with torch imported first, the mode that always followed torch's step ran 1.6x slower than
    the same work elsewhere in the round."""
    order, done = random.Random(0), 0
    while names:
        names = list(names)
        if done:
            order.shuffle(names)
        for name in names:
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
    """The median of ``samples`` (NaN when empty). In plain Python: a race takes a few hundred medians of a few
    numbers each, where ``np.median``'s ~11 us a call (against ~1 us) cost a sub-millisecond layer's tuning
    more than its candidates' runs did."""
    s = sorted(map(float, samples))
    n = len(s)
    if not n:
        return float("nan")
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def noise(samples) -> float:
    """Relative uncertainty of the median of ``samples``: MAD / median / sqrt(n) (0 for fewer than 2)."""
    if len(samples) < 2:
        return 0.0
    med = median(samples)
    if med <= 0:
        return 0.0
    return median([abs(t - med) for t in samples]) / med / math.sqrt(len(samples))


def without_spikes(samples, ratio: float, floor: float = float("inf")) -> list:
    """The runs that are not spikes: at most ``ratio`` times the fastest of ``samples`` and ``floor`` (say, a
    warm-up run, which is never faster than a clean run). On a shared machine noise mostly adds time (another
    process takes the core, a page fault, a cache flushed), so the fastest run is the floor of the true time
    and a run far above it was disturbed.

    Spikes are rare. Where they would be most of the runs, the machine's speed moved instead (this VM has phases
    of seconds that slow every call 1.6-1.9x, ``bench/results/cpu-speed-states.md``), and the fastest run is the
    odd one, from another moment: the runs kept are then those within ``ratio`` of their median. Measured
    (2026-12-06, AMD EPYC Zen 3, ResNet-18's C256 14px layer, a first tuning): ``direct`` ran 2.37 ms once and
    3.77-4.15 ms in its 11 runs after, while ``winograd_fused_4x4`` ran 2.60-2.90 ms in the same rounds; the 11
    were counted as spikes, ``direct`` kept on its one run, and the judge found it 13% slower."""
    low = min(min(samples, default=floor), floor)
    kept = [t for t in samples if t <= ratio * low]
    if 2 * len(kept) >= len(samples):
        return kept
    level = median(samples)
    return [t for t in samples if t <= ratio * level]


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

    NaN and Inf operands (a diverged loss, one bad pixel) are judged by ``judge``: by where the result's NaN
    and Inf entries are, not by a NaN norm.
    """

    def __init__(self, op: str, a, b, p: ConvParams):
        self.op = op
        a, b = np.asarray(a), np.asarray(b)
        self.operands_finite = bool(np.isfinite(a).all() and np.isfinite(b).all())
        with np.errstate(invalid="ignore", over="ignore"):      # Inf * 0 and Inf - Inf: NaN, as intended
            self._reference(op, a, b, p)

    def _reference(self, op: str, a, b, p: ConvParams) -> None:
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
        if op == "forward":
            x, w = a[self.images][:, self.channels], b[self.outputs][:, self.local]
            self.strips = _strips(sub.out_hw[0])
            self.ref = _forward_strips(x, w, sub, self.strips)
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
        return int(np.count_nonzero(np.isnan(np.asarray(out)))) if self.operands_finite else 0

    def error(self, out) -> float:
        """max|sample - reference| / max|reference| over the finite entries; inf when ``judge`` finds it wrong."""
        return self.judge(out).error

    def judge(self, out) -> "Verdict":
        """The sample of ``out`` against the reference: its error and its NaN/Inf entries (``judge``)."""
        return judge(self.sample(out), self.ref, self.operands_finite)


class Verdict(NamedTuple):
    """``error``: the normwise error over the entries finite in both (inf when ``nonfinite`` is wrong);
    ``nonfinite``: "" (no NaN or Inf anywhere), "same" (NaN, +Inf, -Inf exactly where the reference has them),
    "spread" (accepted: see ``judge``) or "wrong: <why>" (rejected)."""

    error: float
    nonfinite: str


def judge(result, ref, operands_finite: bool = True) -> Verdict:
    """A result's NaN and Inf entries, judged by where they are against the float64 reference's (rounded to
    the result's dtype, so a float16 sum over 65504 is Inf in both), and the normwise error of the rest.

    What the reference computes: each output (or gradient entry) is one sum of products, and IEEE arithmetic
    makes such a sum non-finite in an order-independent way: NaN when a term is NaN, Inf * 0 or when +Inf
    and -Inf terms meet (Inf - Inf), else +-Inf when a term is. So one NaN or Inf pixel reaches exactly the
    outputs whose sums read it (a kernel-sized patch, every output channel), and an algorithm that computes
    the same sums (direct, implicit_gemm, im2col, depthwise) gives NaN and Inf at the same entries, of the
    same kind: "same".

    What the transform algorithms compute: FFT and Winograd mix a whole image (FFT) or a tile (Winograd)
    into every transformed entry, so one Inf becomes Inf - Inf = NaN over the image or tile, and an Inf of
    the reference comes back as NaN. Measured on N2 C4 12x12 -> K5 3x3 with one Inf in x: the reference has
    45 non-finite outputs; fft and fft_tiled 720 (every output plane of the Inf's image), winograd_4x4 80,
    winograd_6x6 245, all NaN, and none of them finite where the reference is not.

    That spread is "acceptable", not "wrong": (1) the choice is made per shape and kept for every later call
    of that shape; judging it on the values of one call would let a NaN on the first call pin a slower
    algorithm for the rest of the run, and in the cache file; (2) nothing is hidden: every NaN or Inf of the
    reference is NaN or Inf in the result, so a NaN loss stays NaN and the user's own check sees it; (3) cuDNN's
    FFT and Winograd algorithms do the same, and benchmark off may pick them too. So with NaN or Inf among
    the operands, a result may have more non-finite entries than the reference, or NaN for its Inf ("spread").

    "wrong", rejected: a NaN or Inf of the reference that the result makes finite (it hides the problem), an
    Inf of the other sign, or any NaN or Inf the reference does not have when every operand was finite (an
    algorithm's own fault).
    """
    result, ref = np.asarray(result), np.asarray(ref, dtype=np.float64)
    if result.dtype.kind == "f" and result.dtype.itemsize < 8:
        with np.errstate(over="ignore"):
            ref_kinds = ref.astype(result.dtype).astype(np.float64)     # where the dtype's range ends: Inf
    else:
        ref_kinds = ref
    result = result.astype(np.float64)
    bad, good = ~np.isfinite(ref_kinds), np.isfinite(result)
    if not bad.any() and good.all():
        return Verdict(reference.normwise_error(result, ref), "")
    hidden = int((bad & good).sum())
    flipped = int((np.isinf(ref_kinds) & np.isinf(result) & (np.sign(ref_kinds) != np.sign(result))).sum())
    extra = int((~bad & ~good).sum())
    if hidden or flipped or (extra and operands_finite):
        why = [f"{hidden} NaN/Inf of the reference made finite"] if hidden else []
        why += [f"{flipped} Inf of the other sign"] if flipped else []
        if extra and operands_finite:
            why.append(f"{extra} NaN/Inf where the reference has none, from finite operands")
        return Verdict(float("inf"), "wrong: " + ", ".join(why))
    both = ~bad & good
    scale = np.max(np.abs(ref[~bad]), initial=0.0)
    diff = np.max(np.abs(result[both] - ref[both]), initial=0.0)
    error = float(diff / scale) if scale > 0 else float(diff)
    same = not extra and np.array_equal(result[bad], ref_kinds[bad], equal_nan=True)
    return Verdict(error, "same" if same else "spread")


def _strips(Ho: int) -> list:
    """(first, end) output rows of the strips: top, middle and bottom, or all rows when they would cover half."""
    if 6 * CHECK_ROWS >= Ho:
        return [(0, Ho)]
    return [(s, s + CHECK_ROWS) for s in (0, Ho // 2 - CHECK_ROWS // 2, Ho - CHECK_ROWS)]


def _forward_strips(x, w, p: ConvParams, strips: list) -> np.ndarray:
    """The float64 reference of the output rows of ``strips`` (each ``CHECK_ROWS`` rows, or the one strip of all
    rows), stacked along the rows axis: each strip's band of zero-padded input rows becomes an image of one batch,
    so the reference runs once (its loop over the kernel's taps is most of its cost: 121 taps for an 11x11 kernel,
    3x the calls when each strip ran apart)."""
    (top, bottom), (left, right) = p.padding
    xpad = np.pad(x, ((0, 0), (0, 0), (top, bottom), (0, 0)))
    rows = strips[0][1] - strips[0][0]
    band = (rows - 1) * p.stride[0] + p.kernel_extent[0]
    bands = np.concatenate([xpad[:, :, lo * p.stride[0]:lo * p.stride[0] + band] for lo, _ in strips])
    sub = ConvParams.from_shapes(bands.shape, w.shape, stride=p.stride, dilation=p.dilation, groups=p.groups,
                                 padding=((0, 0), (left, right)), dtype=p.dtype)
    return np.concatenate(np.split(reference.forward(bands, w, sub), len(strips)), axis=2)
