"""``python -m autotune train``: train a model through the dispatcher (benchmark mode on, every conv pass tuned),
with a tqdm bar per epoch; report the held-out accuracy and the time per epoch, the first epoch's tuning apart.

    python -m autotune train --model lenet5 --data digits --epochs 10
"""
from __future__ import annotations

import argparse
import sys

from convalgos.arrays import simulator_enabled

from . import cache, profile, train
from .cli_common import ctrl_c_lands, interrupted, non_negative, positive_int, write_json


def train_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="autotune train", description="train a model through the dispatcher "
                                 "(benchmark mode on); report held-out accuracy and time per epoch")
    ap.add_argument("--model", default="lenet5", help="the model (default lenet5)")
    ap.add_argument("--data", default="digits", help=f"one of {', '.join(train.DATASETS)} (default digits)")
    ap.add_argument("--epochs", type=positive_int, default=10)
    ap.add_argument("--batch-size", type=positive_int, default=64)
    ap.add_argument("--lr", type=non_negative, default=0.01)
    ap.add_argument("--momentum", type=non_negative, default=0.9)
    ap.add_argument("--weight-decay", type=non_negative, default=5e-4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--benchmark-limit", type=positive_int, default=None, metavar="N",
                    help="time at most N best-ranked candidates per pass and layer")
    ap.add_argument("--subset", type=positive_int, default=None, metavar="N",
                    help="train on N images of the training split only (quick runs)")
    ap.add_argument("--deterministic", action="store_true",
                    help="the same numbers every run: deterministic algorithms chosen by the heuristic")
    ap.add_argument("--json", metavar="PATH", help="write the results as JSON ('-': stdout, the report to stderr)")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where the model trains (default cpu)")
    return ap


def train_main(argv) -> int:
    ap = train_parser()
    args = ap.parse_args(argv)
    if train.problem(args.model, args.data):
        ap.error(train.problem(args.model, args.data))
    if args.json and args.json != "-" and cache.writable_problem(args.json):
        ap.error(f"--json {args.json}: {cache.writable_problem(args.json)}")
    if args.device == "cuda" and not simulator_enabled() and profile.gpu_problem():
        ap.error("--device cuda: " + profile.gpu_problem())
    out = sys.stderr if args.json == "-" else sys.stdout
    mode = "deterministic, heuristic choices" if args.deterministic else "benchmark on"
    simulated = args.device == "cuda" and simulator_enabled()
    where = "cuda: the Numba CUDA simulator" if simulated else profile.device_description(args.device)
    print(f"autotune train: {args.model} on {args.data}, {args.epochs} epochs, batch {args.batch_size}, "
          f"lr {args.lr:g}, momentum {args.momentum:g}, weight decay {args.weight_decay:g}, seed {args.seed}, "
          f"{mode}, {where}", file=out)

    def report(record):
        print(train.epoch_line(record), file=out, flush=True)
    try:
        with ctrl_c_lands():
            result = train.fit(args.model, args.data, epochs=args.epochs, batch_size=args.batch_size, lr=args.lr,
                               momentum=args.momentum, weight_decay=args.weight_decay, seed=args.seed,
                               deterministic=args.deterministic, benchmark_limit=args.benchmark_limit,
                               subset=args.subset, on_epoch=report, device=args.device)
    except ImportError as err:                 # the data set's extra is not installed
        ap.error(str(err))
    except KeyboardInterrupt:
        return interrupted(None, "trains from the start again and reuses them")
    print(train.result_line(result), file=out)
    if args.json:
        write_json(args.json, result)
    return 0
