"""Changing shapes: how often each layer was re-tuned for a new input shape, and what it cost.

Benchmark mode tunes per input shape. A new batch size (the last short batch of an epoch) or image size
tunes every layer again: 0.15-0.6 s per pass on ResNet-20 against ~20 ms of steady work. cuDNN says nothing
about it; here every tuning is logged at INFO level (layer, shape, seconds, choice), ``cache_info().layers``
counts per layer (the key without N, H and W: same weights and parameters) the input shapes tuned and the
seconds spent, and past ``warn_after`` distinct shapes of one layer a warning says so, once per layer,
through ``logging`` and ``warnings``, with the cost so far and the remedies.

The remedy offered here is patience (proposed in pytorch#4392): ``Tuner(patience=N)`` (or
``autotune.patience = N``) stops timing new shapes of a layer once N of its shapes are tuned, and reuses the
choice of its nearest tuned shape (nearest in log N, log H and log W), or the heuristic's where none of the
same pass exists. Such entries say so: ``source == "patience"``.
"""
from __future__ import annotations

import logging
import math
import threading
import warnings
from collections import namedtuple

LOG = logging.getLogger("autotune")

#: per layer: distinct input shapes tuned, tunings (one per pass and shape), seconds spent tuning.
LayerInfo = namedtuple("LayerInfo", "shapes tunings seconds")


class RetuningWarning(UserWarning):
    """One layer has been tuned for many input shapes."""


def layer_of(key) -> str:
    """The layer a key belongs to: everything but N, H, W and the pass."""
    p = key.params
    (t, b), (l, r) = p.padding
    parts = [f"C{p.C} -> K{p.K} {p.R}x{p.S}", f"s{p.stride[0]},{p.stride[1]}", f"p{t},{b},{l},{r}"]
    if p.dilation != (1, 1):
        parts.append(f"d{p.dilation[0]},{p.dilation[1]}")
    if p.groups != 1:
        parts.append(f"g{p.groups}")
    det = " deterministic" if key.deterministic else ""
    return " ".join(parts) + f" {p.dtype} | {key.layout} {key.device} threads={key.threads}{det}"


def shape_of(key) -> tuple:
    p = key.params
    return p.N, p.C, p.H, p.W


def distance(a, b) -> float:
    """How far apart two keys' input shapes are: the summed |log ratio| of N, H and W."""
    (n1, _, h1, w1), (n2, _, h2, w2) = shape_of(a), shape_of(b)
    return abs(math.log(n1 / n2)) + abs(math.log(h1 / h2)) + abs(math.log(w1 / w2))


class ShapeLog:
    """Per-layer counts of the input shapes tuned; warns once per layer past ``warn_after`` shapes."""

    def __init__(self, warn_after: int = 8):
        self.warn_after = warn_after
        self._lock = threading.Lock()
        self._layers: dict = {}           # layer -> {"shapes": set, "tunings": int, "seconds": float}
        self._warned: set = set()

    def shapes(self, key) -> int:
        """How many distinct input shapes of ``key``'s layer were tuned."""
        with self._lock:
            return len(self._layers.get(layer_of(key), {}).get("shapes", ()))

    def knows(self, key) -> bool:
        """Was this input shape of the layer tuned (for any pass)?"""
        with self._lock:
            return shape_of(key) in self._layers.get(layer_of(key), {}).get("shapes", ())

    def record(self, entry) -> None:
        """Count a tuning, log it at INFO, and warn once when its layer passes ``warn_after`` shapes."""
        layer = layer_of(entry.key)
        with self._lock:
            counts = self._layers.setdefault(layer, {"shapes": set(), "tunings": 0, "seconds": 0.0})
            counts["shapes"].add(shape_of(entry.key))
            counts["tunings"] += 1
            counts["seconds"] += entry.tuning_seconds
            n, seconds = len(counts["shapes"]), counts["seconds"]
            warn = n > self.warn_after and layer not in self._warned
            if warn:
                self._warned.add(layer)
        LOG.info("tuned %s of layer %s at input %s in %.3f s: %s", entry.key.op, layer,
                 "x".join(map(str, shape_of(entry.key))), entry.tuning_seconds, entry.algo)
        if warn:
            message = (f"autotune: layer {layer} has been tuned for {n} distinct input shapes, {seconds:.2f} s of "
                       f"tuning so far: every new batch or image size tunes each of its passes again. Remedies: "
                       f"keep the shapes fixed (drop or pad the last short batch), turn patience on "
                       f"(autotune.patience = N or Tuner(patience=N): after N shapes, reuse the nearest tuned "
                       f"shape's choice), or turn benchmark off for this model.")
            LOG.warning(message)
            warnings.warn(message, RetuningWarning, stacklevel=4)

    def info(self) -> dict:
        with self._lock:
            return {layer: LayerInfo(len(c["shapes"]), c["tunings"], c["seconds"]) for layer, c in self._layers.items()}

    def clear(self) -> None:
        with self._lock:
            self._layers.clear()
            self._warned.clear()
