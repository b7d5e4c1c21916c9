"""A converted model under DistributedDataParallel, and one dispatch table per fleet; bench/results/cpu-fleet.md.

    python -m bench.fleet            # the record: one fleet run per import order (about a minute, quiet)
    python -m bench.fleet --quick    # a smoke test: batch 4, few rounds, written under /tmp unless --out

The bench starts its own fleet: 2 ranks spawned on this machine, 1 thread each (NUMBA_NUM_THREADS,
OMP_NUM_THREADS, torch.set_num_threads), gloo on localhost (a file store). Each rank holds the torch twin of
ResNet-20 (``bench.torch_twin``), converted by ``autotune.torch.convert`` and unconverted, both wrapped in
DistributedDataParallel, and its own batch.

- Tuning: the converted model's first step with a fresh table, in four modes run one after the other, in
  rounds (after one untimed round that compiles or loads the kernels): ``alone`` (each rank tunes every key
  itself, as cuDNN's benchmark mode does, both at once on the machine's cores); ``fleet, at the misses`` (a
  ``Fleet``: each missed key timed by one rank while the other waits); ``fleet, prepared`` (``Fleet.prepare``
  collects the step's keys and splits them, then the step runs on hits); ``fleet as two nodes`` (prepared, the
  ranks told they are on different machines, so they time at once: what two machines would do, measured here
  on one machine's two cores). Seconds of the step (``prepare`` included), the slower rank's; keys each rank
  timed; the seconds spent timing summed over the ranks; and how many keys the ranks' tables disagree on.
- Steps: the converted step against the unconverted one under DDP, after tuning, interleaved round by round
  (``autotune.measure.interleaved``): medians and the quartiles of the per-round ratio, rank 0's clock.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import tempfile
import time
from pathlib import Path

# each rank's first import: the module named by BENCH_FLEET_FIRST (set by ``main`` per import order), before
# autotune; spawned ranks import this module first, so this line decides their order
importlib.import_module(os.environ.get("BENCH_FLEET_FIRST", "autotune"))
import autotune  # noqa: E402,F401

from .common import RESULTS, header, write_record  # noqa: E402

#: a rank's first import per order, as bench.orders names them
FIRST = {"numpy": "numpy", "torch": "torch", "convalgos": "autotune"}

MODES = ("alone", "fleet, at the misses", "fleet, prepared", "fleet as two nodes")
ONE_THREAD = {"NUMBA_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}


def tuning_round(mode: str, rank: int, model, step, prepare_step) -> dict:
    """One tuning of ``model``'s first step in ``mode`` on a fresh table; what this rank saw."""
    import torch.distributed as dist

    import autotune.fleet
    import autotune.torch as at
    tuner = autotune.Tuner(benchmark=True)
    for m in model.modules():
        if isinstance(m, at.Conv2d):
            m.tuner = tuner
    fleet = None
    dist.barrier()
    began = time.perf_counter()
    if mode != "alone":
        fleet = autotune.fleet.Fleet(tuner, node=f"rank {rank}" if mode == "fleet as two nodes" else None)
    if mode in ("fleet, prepared", "fleet as two nodes"):
        fleet.prepare(model, prepare_step)
    step()
    seconds = time.perf_counter() - began
    dist.barrier()
    entries = list(tuner.dispatch_table())
    mine = [e for e in entries if fleet is None or fleet.owners.get(e.key) == rank]
    if fleet is not None:
        fleet.leave()
    gathers = (fleet.channel.gathers, fleet.channel.seconds) if fleet else (0, 0.0)
    info = tuner.cache_info()
    return {"seconds": seconds, "timed": len(mine), "timing": sum(e.tuning_seconds for e in mine), "gathers": gathers,
            "reraces": info.reraces, "provisional": info.provisional,
            "table": {json.dumps(e.key.to_dict(), sort_keys=True): e.algo for e in entries}}


def rank_main(rank: int, folder: str, batch: int, rounds: int, repeats: int) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from autotune import measure

    from .torch_bridge_cases import twins
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{folder}/store", rank=rank, world_size=2)
    theirs, ours = (DDP(m) for m in twins("resnet20"))
    g = torch.Generator().manual_seed(10 + rank)
    x, labels = torch.randn(batch, 3, 32, 32, generator=g), torch.randint(0, 10, (batch,), generator=g)
    F, steps = torch.nn.functional, {}
    for name, model in (("converted", ours), ("torch", theirs)):
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

        def step(model=model, opt=opt):
            opt.zero_grad()
            F.cross_entropy(model(x), labels).backward()
            opt.step()
        steps[name] = step

    def prepare_step():
        F.cross_entropy(ours(x), labels).backward()

    tuning_round("alone", rank, ours, steps["converted"], prepare_step)          # compiles or loads the kernels
    tunings = {mode: [] for mode in MODES}
    for _ in range(repeats):
        for mode in MODES:
            tunings[mode].append(tuning_round(mode, rank, ours, steps["converted"], prepare_step))
    samples = measure.interleaved(steps, rounds)
    (Path(folder) / f"rank{rank}.json").write_text(json.dumps({"tunings": tunings, "steps": samples}))
    dist.destroy_process_group()


def run(batch: int, rounds: int, repeats: int) -> list:
    import torch.multiprocessing as mp
    folder = tempfile.mkdtemp(prefix="bench-fleet-")
    os.environ.update(ONE_THREAD)
    mp.spawn(rank_main, args=(folder, batch, rounds, repeats), nprocs=2, join=True)
    return [json.loads((Path(folder) / f"rank{r}.json").read_text()) for r in range(2)]


def both(ranks: list, field: str, form: str = "") -> str:
    """``field`` of rank 0 + rank 1."""
    return " + ".join(format(r[field], form) for r in ranks)


def disagreements(tables: list) -> int:
    return sum(tables[0].get(k) != tables[1].get(k) for k in set(tables[0]) | set(tables[1]))


def report(ranks: list, batch: int, rounds: int, repeats: int, load: tuple, quick: bool) -> str:
    import numpy as np

    from autotune import measure
    steps = ranks[0]["steps"]
    paired = np.array(steps["converted"]) / np.array(steps["torch"])
    ours, theirs = measure.median(steps["converted"]), measure.median(steps["torch"])
    lines = [header("CPU: a converted model under DistributedDataParallel, one dispatch table per fleet"),
             f"Command: `python -m bench.fleet{' --quick' if quick else ''}`: 2 ranks spawned on this machine, 1 "
             f"thread each, gloo on localhost; torch ResNet-20 b{batch} per rank. Load average {load[0]:.1f} before, "
             f"{load[2]:.1f} after (the ranks' own threads included), on {os.cpu_count()} cores; before the run, "
             f"probes spinning on every core waited {load[1]:.1%} of their time for a CPU"
             + (": other processes were using the cores, the timings are disturbed." if load[1] > 0.05 else
                " (quiet).") + "\n",
             "## A training step under DDP, after tuning\n",
             f"{rounds} interleaved rounds, rank 0's clock (a DDP step waits for the other rank's gradients).\n",
             "| step | median ms | ratio (quartiles per round) |", "|---|---|---|",
             f"| converted (autotune.torch) | {ours * 1e3:.1f} | **{ours / theirs:.2f}** "
             f"({np.percentile(paired, 25):.2f}-{np.percentile(paired, 75):.2f}) |",
             f"| unconverted (torch) | {theirs * 1e3:.1f} | 1 |", "",
             "## Tuning the first step\n",
             f"Per mode, {repeats} round(s) after an untimed one; step s: the step's (``Fleet()`` and ``prepare`` "
             f"included), the slower rank's, median over rounds. The rest is the last round's: keys each rank timed, "
             f"the seconds it spent timing them (``Entry.tuning_seconds``, of the last race of each key), the "
             f"provisional entries it raced again within the step (the Tuner does so on its machine's quiet "
             f"reading, without a fleet only: a fleet re-races in ``Fleet.rerace``, not called here) and those left "
             f"provisional, the fleet's all-gathers and the seconds "
             f"each rank spent in them (waiting for the other's timing included), and the keys on which the ranks' "
             f"tables chose differently.\n",
             "| mode | step s | / alone | keys timed by rank 0 + rank 1 | timing s, rank 0 + rank 1 | re-races, "
             "provisional after, rank 0 + rank 1 | all-gathers, s in them, rank 0 + rank 1 | keys the tables disagree "
             "on |", "|---|---|---|---|---|---|---|---|"]
    alone = None
    for mode in MODES:
        rounds_ = [[r["tunings"][mode][i] for r in ranks] for i in range(repeats)]
        seconds = measure.median([max(t["seconds"] for t in pair) for pair in rounds_])
        alone = seconds if alone is None else alone
        last = rounds_[-1]
        tables = [t["table"] for t in last]
        cells = [f"{seconds:.2f}", f"{seconds / alone:.2f}", both(last, "timed"), both(last, "timing", ".2f"),
                 both(last, "reraces") + ", " + both(last, "provisional"),
                 f"{last[0]['gathers'][0]}, {last[0]['gathers'][1]:.2f} + {last[1]['gathers'][1]:.2f}",
                 f"{disagreements(tables)} of {len(tables[0])}"]
        lines.append(f"| {mode} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fleet", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="batch 4, 3 rounds, one tuning round per mode")
    parser.add_argument("--batch", type=int, default=None, help="images per rank (default 32; 4 with --quick)")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved step rounds (default 20)")
    parser.add_argument("--repeats", type=int, default=None, help="tuning rounds per mode (default 2)")
    parser.add_argument("--out", type=Path, default=None, help="the record (default bench/results/cpu-fleet.md)")
    parser.add_argument("--orders", default="numpy,torch,convalgos",
                        help="each rank's first import, one fleet run per order (default numpy,torch,convalgos)")
    args = parser.parse_args(argv)
    batch = args.batch or (4 if args.quick else 32)
    rounds, repeats = args.rounds or (3 if args.quick else 20), args.repeats or (1 if args.quick else 2)
    out = args.out or (Path(tempfile.gettempdir()) / "cpu-fleet.md" if args.quick else RESULTS / "cpu-fleet.md")
    from autotune.race.contention import machine_wait_share
    parts = []
    for order in args.orders.split(","):
        os.environ["BENCH_FLEET_FIRST"] = FIRST[order]
        before = (os.getloadavg()[0], machine_wait_share(0.3))
        ranks = run(batch, rounds, repeats)
        text = report(ranks, batch, rounds, repeats, (*before, os.getloadavg()[0]), args.quick)
        parts.append(text if not parts else text.split("\n", 4)[-1])
        parts[-1] = parts[-1].replace("## A training step under DDP", f"## {order} first (each rank's first import)\n\n"
                                      "### A training step under DDP", 1).replace("## Tuning the first step",
                                                                                 "### Tuning the first step", 1)
    write_record(out, "\n".join(parts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
