"""What a model's conv layers are and what the table chose for them: recording every conv call
(``ConvProfile``), finding shapes without computing (``conv_calls``, ``accepted_sizes``), the table's forward
entries per layer, which algorithms run every layer, a torch peer, and the device in words."""
from __future__ import annotations

import sys

import numpy as np

from convalgos import ConvParams

import autotune

from .. import measure, nn
from ..cache import cpu_model
from .tf32 import torch_tf32_off


class ConvProfile:
    """Within the block, every conv call of ``model`` is recorded: ``calls`` (layer name, ConvParams) in call
    order, ``params`` (layer name -> ConvParams of its first call), ``seconds`` (layer name -> seconds of its
    latest call, timed by ``timer``), and ``bar`` (a tqdm bar, or None) advances once per call."""

    def __init__(self, model, *, bar=None, timer=None):
        self.convs = nn.conv_layers(model)
        self.timer = measure.Timer() if timer is None else timer
        self.bar = bar
        self.calls: list[tuple[str, ConvParams]] = []
        self.params: dict[str, ConvParams] = {}
        self.seconds: dict[str, float] = {}

    def __enter__(self):
        for name, conv in self.convs:
            conv.forward = self._wrap(name, conv, type(conv).forward.__get__(conv))
        return self

    def __exit__(self, *exc):
        for _, conv in self.convs:
            del conv.forward

    def layers(self) -> list[ConvParams]:
        return list(dict.fromkeys(p for _, p in self.calls))

    def _wrap(self, name, conv, forward):
        def recorded(x, **kw):             # kw: a fused layer's epilogue operands (residual=...)
            p = ConvParams.from_arrays(x, conv.weight, conv.bias, stride=conv.stride, padding=conv.padding,
                                       dilation=conv.dilation, groups=conv.groups)
            self.calls.append((name, p))
            self.params.setdefault(name, p)
            if self.bar is not None:
                self.bar.set_postfix_str(name)
            y = [None]
            self.seconds[name] = self.timer.time(lambda: y.__setitem__(0, forward(x, **kw)))
            if self.bar is not None:
                self.bar.update()
            return y[0]
        return recorded


def _no_conv(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """A conv that computes nothing: zeros of the output's shape (for finding shapes)."""
    p = ConvParams.from_arrays(x, weight, stride=stride, padding=padding, dilation=dilation, groups=groups)
    return np.zeros(p.out_shape, x.dtype)


def conv_calls(model, shape, dtype="float32") -> list[tuple[str, ConvParams]]:
    """(layer name, ConvParams) of every conv call of ``model`` on an input of ``shape``, found without computing
    a convolution. Raises whatever the model raises for an input it cannot take."""
    with nn.use_algorithm(model, _no_conv), ConvProfile(model) as prof:
        model(np.zeros(shape, dtype))
    return prof.calls


def accepted_sizes(model, most: int) -> list[int]:
    """The square input sizes from 1 to ``most`` that ``model`` takes (its channels, batch 1)."""
    fits = []
    for size in range(1, most + 1):
        try:
            conv_calls(model, (1, model.input_shape[0], size, size))
        except (ValueError, IndexError):
            continue
        fits.append(size)
    return fits


def spans(values: list[int]) -> str:
    """[1, 2, 3, 7] -> "1-3, 7"."""
    parts, start = [], None
    for i, v in enumerate(values):
        start = v if start is None else start
        if i + 1 == len(values) or values[i + 1] != v + 1:
            parts.append(str(v) if start == v else f"{start}-{v}")
            start = None
    return ", ".join(parts)


#: tqdm's bar without its time-left estimate, for passes that tune: their first calls compile for seconds and
#: later ones hit the table in milliseconds, so a rate-based estimate is meaningless (ResNet-18's first run
#: showed 7 minutes left for a pass that ended at 53 s).
NO_ESTIMATE = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]"


def first_pass(model, x, desc="tuning") -> tuple[ConvProfile, float]:
    """One forward pass (it tunes every new key) with a progress bar per conv call on stderr."""
    from tqdm import tqdm
    with tqdm(total=len(nn.conv_layers(model)), desc=desc, unit="conv", file=sys.stderr, leave=False,
              bar_format=NO_ESTIMATE) as bar:
        with ConvProfile(model, bar=bar) as prof:
            start = prof.timer.now()
            model(x)
            seconds = prof.timer.now() - start
    return prof, seconds


# ---- the table, per layer ---------------------------------------------------------------------------------
def forward_entries(layers, table=None, device="cpu") -> dict:
    """ConvParams -> the table's (default: autotune's) forward entry on ``device`` ("cpu" or "cuda") for each of
    ``layers`` that has one."""
    wanted = set(layers)
    table = autotune.dispatch_table() if table is None else table
    return {e.key.params: e for e in table if e.key.op == "forward" and e.key.params in wanted
            and e.key.device.split(":")[0] == device}


def unsupported_layers(algorithm, layers) -> list[str]:
    """Why ``algorithm`` cannot run each of ``layers`` it does not support (forward pass)."""
    return [algorithm.supports(p).reason for p in layers if not algorithm.supports(p)]


def grouped_reasons(name: str, reasons: list, shown: int = 2) -> str:
    """``unsupported_layers``' reasons grouped by what ``name`` needs, each with what the layers had instead (at
    most ``shown`` distinct) and, when the needs differ, their counts of layers: "needs a 3x3 kernel (4 layers:
    got 7x7 or 1x1); needs stride 1 (3 layers: got (2, 2))". One layer's reason never stands for the others'."""
    groups = {}
    for reason in reasons:
        reason = reason[len(name) + 1:] if reason.startswith(name + " ") else reason
        need, _, got = reason.partition(", got ")
        groups.setdefault(need, []).append(got)
    parts = []
    for need, gots in groups.items():
        distinct = list(dict.fromkeys(g for g in gots if g))
        had = " or ".join(distinct[:shown]) + (f" or {len(distinct) - shown} other(s)" if len(distinct) > shown else "")
        if len(groups) == 1:
            parts.append(need + (f", got {had}" if had else ""))
        else:
            count = f"{len(gots)} layer{'s' if len(gots) > 1 else ''}"
            parts.append(f"{need} ({count}" + (f": got {had})" if had else ")"))
    return "; ".join(parts)


def forced_passes(registry, layers) -> tuple[dict, dict]:
    """({"autotuned": None, name: name for each algorithm that runs every layer}, {other name: the reasons})."""
    passes, unsupported = {"autotuned": None}, {}
    for name, algorithm in registry.items():
        reasons = unsupported_layers(algorithm, layers)
        if reasons:
            unsupported[name] = reasons
        else:
            passes[name] = name
    return passes, unsupported


def torch_conv2d(device: str = "cpu"):
    """A conv2d with convalgos' signature computed by torch, or None without torch (or, for ``"cuda"``,
    without a CUDA torch). On the CPU torch gets numba's thread count; on the GPU arrays pass through DLPack,
    and TF32 is turned off (fp32 against fp32): the conv2d's ``tf32`` says what torch reports after."""
    try:
        import torch
    except ImportError:
        return None
    if device == "cuda" and not torch.cuda.is_available():
        return None
    tf32 = torch_tf32_off(torch) if device == "cuda" else None
    import numba
    torch.set_num_threads(numba.get_num_threads())

    def tensor(a):
        if a is None:
            return None
        return torch.from_numpy(np.ascontiguousarray(a)) if isinstance(a, np.ndarray) else torch.from_dlpack(a)

    def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
        with torch.no_grad():
            y = torch.nn.functional.conv2d(tensor(x), tensor(weight), tensor(bias), stride, padding, dilation,
                                           groups)
        if isinstance(x, np.ndarray):
            return y.numpy()
        import cupy
        return cupy.from_dlpack(y)
    conv2d.tf32 = tf32
    return conv2d


def device_description(device: str) -> str:
    """The machine a run is on, in words: the CPU model and threads, or the GPU's name."""
    if device == "cuda":
        from ..devices import GpuDevice
        return GpuDevice().name
    import numba
    return f"cpu: {cpu_model()}, {numba.get_num_threads()} threads"


def layer_lines(calls, entries) -> list[str]:
    """One line per conv call: layer, shape, the chosen algorithm, its time and how it was chosen."""
    widths = [max([len(h)] + [len(v) for v in values]) for h, values in (
        ("layer", [name for name, _ in calls]), ("shape", [str(p) for _, p in calls]),
        ("chosen", [entries[p].algo for _, p in calls if p in entries]))]
    lines = [" ".join(f"{h:<{w}}" for h, w in zip(("layer", "shape", "chosen"), widths)) + f" {'ms':>8}  source"]
    for name, p in calls:
        e = entries.get(p)
        ms = f"{e.times[e.algo] * 1e3:8.3f}" if e is not None and e.algo in e.times else f"{'-':>8}"
        cells = (name, str(p), e.algo if e else "?")
        lines.append(" ".join(f"{c:<{w}}" for c, w in zip(cells, widths)) + f" {ms}  {e.source if e else ''}")
    return lines


def gpu_problem() -> str | None:
    """Why the GPU cannot run here, with how to fix it, or None (``convalgos.arrays.gpu_problem``)."""
    from convalgos import arrays
    return arrays.gpu_problem()
