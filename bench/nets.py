"""Conv time of whole CNNs: autotuned, forced to each single algorithm, and torch's, in each import order;
bench/results/cpu-nets.md.

    python -m bench.nets            # ResNet-18 b1 224, ResNet-20 b32, LeNet-5 b64, VGG-16 b1 224, MobileNet-v1 b1 224
    python -m bench.nets --quick    # a smoke test: small inputs, one round, convalgos first, under /tmp unless --out
    python -m bench.nets --models resnet20,lenet5 --orders numpy --out /tmp/nets.md    # some nets, one order

Each net is measured in fresh processes, one per import order (numpy, torch or convalgos imported first) and
round, the orders rotated round by round (``bench.orders``); each process times ``--rounds`` rounds, and the
record pools the rounds of an order's processes. In a process, one forward pass at a time runs with every conv
autotuned (benchmark mode, tuned first), forced to one algorithm (where that algorithm supports every conv of
the net), or computed by torch's conv2d (torch gets numba's thread count). Each conv call is timed on its own
and summed: "conv time" excludes BatchNorm, pooling and the classifier, which are the same NumPy code in every
mode. Modes run interleaved, round by round (``autotune.profile.layer_samples``, through
``autotune.measure.interleaved``), so drift on the shared cores hits all alike; then the whole forward pass
(plain, fused, fused and forced to direct, torch's twin), interleaved too. The tables hold medians over the
pooled rounds, and per layer where the time goes in the autotuned pass against torch.
"""
from __future__ import annotations

import argparse
from contextlib import nullcontext
from pathlib import Path

import numpy as np

import autotune
from autotune import measure, models, nn, profile
from convalgos import ALGORITHMS

from . import orders
from .common import RESULTS, write_record
from .nets_report import plot, report
from .torch_twin import torch_twin

#: (label, model, batch, input H=W); the issue's targets as ratios to torch's conv time.
NETS = [("ResNet-18 b1 224", "resnet18", 1, 224), ("ResNet-20 b32", "resnet20", 32, 32),
        ("LeNet-5 b64", "lenet5", 64, 32), ("VGG-16 b1 224", "vgg16", 1, 224),
        ("MobileNet-v1 b1 224", "mobilenet_v1", 1, 224)]
QUICK = [("ResNet-18 b1 64", "resnet18", 1, 64), ("ResNet-20 b2", "resnet20", 2, 32),
         ("LeNet-5 b4", "lenet5", 4, 32), ("VGG-16 b1 32", "vgg16", 1, 32),
         ("MobileNet-v1 b1 64", "mobilenet_v1", 1, 64)]


def conv_times(model_name, batch, size, rounds):
    """The conv time of every layer in each mode (mode -> {layer: seconds per round}), the shape of each layer,
    the unsupported counts per algorithm, the tuning seconds, and the autotuned choice per layer."""
    model = models.get_model(model_name)
    x = np.random.default_rng(0).standard_normal((batch, model.input_shape[0], size, size)).astype(np.float32)
    with autotune.flags(benchmark=True):
        prof, tuning = profile.first_pass(model, x)          # tunes every new key
        layers = prof.layers()
        modes, reasons = profile.forced_passes(ALGORITHMS, layers)
        unsupported = {name: len(why) for name, why in reasons.items()}
        torch_conv = profile.torch_conv2d()
        if torch_conv is not None:
            modes["torch"] = torch_conv
        samples = profile.layer_samples(model, x, modes, rounds)      # one warm-up round, not counted
    chosen = {p: e.algo for p, e in profile.forward_entries(layers).items()}
    return {"conv": samples, "params": {layer: str(p) for layer, p in prof.params.items()},
            "unsupported": unsupported, "tuning": tuning,
            "chosen": {layer: chosen.get(p, "?") for layer, p in prof.params.items()}}


def whole_pass(model_name, batch, size, rounds):
    """mode -> seconds of each round's whole forward pass (eval mode, one table, the benchmark-mode choices):
    ``plain`` (every layer on its own, no prepared weights), ``fused`` (``model.fuse()``: BatchNorm folded, ReLU
    and shortcut as conv epilogues, kept activation buffers, prepared weights), ``direct`` (the fused model with
    every conv forced to direct), and ``torch``, the twin (``bench.torch_twin``) holding the same state_dict,
    where torch is installed."""
    plain = models.get_model(model_name).prepare_weights(False)
    fused = models.get_model(model_name).fuse().prepare_weights(True)
    direct = models.get_model(model_name).fuse().prepare_weights(True)
    for net in (fused, direct):
        net.load_state_dict(plain.state_dict())
    x = np.random.default_rng(1).standard_normal((batch, plain.input_shape[0], size, size)).astype(np.float32)

    def forced():
        with nn.use_algorithm(direct, "direct"):
            direct(x)
    calls, no_grad = {"plain": lambda: plain(x), "fused": lambda: fused(x), "direct": forced}, nullcontext()
    try:
        import torch
        twin = torch_twin(plain).eval()
        twin.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in plain.state_dict().items()})
        tx, no_grad = torch.from_numpy(x), torch.no_grad()
        calls["torch"] = lambda: twin(tx)
    except ImportError:
        pass
    with autotune.flags(benchmark=True), no_grad:
        return measure.interleaved(calls, rounds)      # one warm-up each (tunes the eval keys), not counted


def measure_net(model_name, batch, size, rounds) -> dict:
    """What a child process measures of one net (JSON)."""
    return {**conv_times(model_name, batch, size, rounds), "whole": whole_pass(model_name, batch, size, rounds)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small inputs, one round (a smoke test)")
    ap.add_argument("--rounds", type=int, default=None,
                    help="timed rounds in each process (default 5, 1 with --quick)")
    ap.add_argument("--out", type=Path, default=None, help="markdown path (default bench/results/cpu-nets.md; "
                                                           "/tmp/cpu-nets-quick.md with --quick)")
    ap.add_argument("--models", default=None, help="comma-separated model names to run (default: all five)")
    orders.add_arguments(ap)
    args = ap.parse_args(argv)
    orders.resolve(args)
    rounds = args.rounds or (1 if args.quick else 5)
    chosen = set(args.models.split(",")) if args.models else None
    nets = [net for net in (QUICK if args.quick else NETS) if chosen is None or net[1] in chosen]
    if args.child:
        return orders.emit({label: measure_net(name, batch, size, rounds) for label, name, batch, size in nets})
    out = args.out or (Path("/tmp/cpu-nets-quick.md") if args.quick else RESULTS / "cpu-nets.md")
    results = {}
    for label, model_name, batch, size in nets:
        child = ["--child", "--models", model_name, "--rounds", str(rounds)] + (["--quick"] if args.quick else [])
        per_order = orders.run("bench.nets", child, args, label)
        results[label] = (model_name, {o: orders.merge([c[label] for c in cs]) for o, cs in per_order.items()})
    text = report(results, rounds, args)
    try:
        plot(results, args.orders[0], out.with_suffix(".png"))
        text = text.replace("\n\n## ", f"\n\n![conv time / torch's]({out.with_suffix('.png').name})\n\n## ", 1)
    except ImportError:
        text += "\n(matplotlib not installed: no plot)\n"
    write_record(out, text)


if __name__ == "__main__":
    main()
