"""What each rank runs in the fleet tests (``test_torch_distributed.py``), started as 2 gloo processes on
localhost by ``run_ranks``; each rank writes what it saw to ``<folder>/rank<r>.json`` for the test to judge.

Ranks run 1 thread each (NUMBA_NUM_THREADS, OMP_NUM_THREADS), a tiny CNN (5 keys), and a registry of 2
algorithms, so a run takes seconds. Processes are spawned, never forked (GNU OpenMP aborts a fork).
"""
from __future__ import annotations

import json
import os
import pathlib
import time
import warnings

#: each rank's threads, set before the children import numba
ENV = {"NUMBA_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "OPENBLAS_THREAD_TIMEOUT": "16"}


def run_ranks(worker, folder, *args, nprocs: int = 2, deadline: float = 150.0) -> list:
    """Run ``worker(rank, folder, *args)`` in ``nprocs`` spawned processes; their JSON results, by rank. Fails
    (and kills the processes it started) past ``deadline`` seconds, so a hang is a failed test, never a stuck
    CI."""
    import torch.multiprocessing as mp
    saved = {k: os.environ.get(k) for k in ENV}
    os.environ.update(ENV)
    try:
        context = mp.spawn(worker, args=(str(folder), *args), nprocs=nprocs, join=False)
    finally:
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    ends = time.monotonic() + deadline
    try:
        while not context.join(timeout=max(0.1, ends - time.monotonic())):
            if time.monotonic() > ends:
                raise AssertionError(f"the ranks did not finish within {deadline} s (a hang)")
    finally:
        for process in context.processes:
            if process.is_alive():
                process.kill()
    return [json.loads((pathlib.Path(folder) / f"rank{r}.json").read_text()) for r in range(nprocs)]


def start(rank: int, folder: str, size: int = 2):
    """Join the process group (a file store in ``folder``: no port to pick); returns torch."""
    import autotune  # noqa: F401 - before torch, as a user would
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{folder}/store", rank=rank, world_size=size)
    return torch


def count_tunings(log: list):
    """Log [tuner name, key, samples] of every ``tuning.tune`` this process runs (a tuner's ``_log_name``)."""
    import autotune.tuner
    import autotune.tuning
    real = autotune.tuning.tune

    def counted(tuner, key, *args):
        entry = real(tuner, key, *args)
        log.append([getattr(tuner, "_log_name", "?"), json.dumps(key.to_dict(), sort_keys=True), entry.samples])
        return entry

    autotune.tuning.tune = autotune.tuner.tune = counted


def algorithms(raising_on=None) -> dict:
    """direct and im2col; with ``raising_on``, im2col raises on that rank (a candidate that fails there)."""
    from convalgos import ALGORITHMS
    chosen = {"direct": ALGORITHMS["direct"], "im2col": ALGORITHMS["im2col"]}
    if raising_on is not None:
        chosen["im2col"] = RaisingOn(ALGORITHMS["im2col"], raising_on)
    return chosen


class RaisingOn:
    """An algorithm that delegates to ``inner`` but raises when run on rank ``rank``."""

    def __init__(self, inner, rank):
        self.inner, self.rank = inner, rank

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def forward(self, *args, **kwargs):
        return self._check() or self.inner.forward(*args, **kwargs)

    def backward_data(self, *args, **kwargs):
        return self._check() or self.inner.backward_data(*args, **kwargs)

    def backward_filter(self, *args, **kwargs):
        return self._check() or self.inner.backward_filter(*args, **kwargs)

    def _check(self):
        import torch.distributed as dist
        if dist.get_rank() == self.rank:
            raise RuntimeError(f"injected failure on rank {self.rank}")


def tuner(name: str, **kwargs):
    import autotune
    t = autotune.Tuner(benchmark=True, **kwargs)
    t._log_name = name
    return t


def net(torch):
    nn, F = torch.nn, torch.nn.functional

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.c2, self.fc = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 3, 2, 1), nn.Linear(8, 4)

        def forward(self, x):
            return self.fc(F.relu(self.c2(F.relu(self.c1(x)))).mean((2, 3)))

    torch.manual_seed(0)
    return Net()


def batches(torch, rank: int, steps: int = 3) -> list:
    g = torch.Generator().manual_seed(100 + rank)
    return [(torch.randn(4, 3, 8, 8, generator=g), torch.randint(0, 4, (4,), generator=g)) for _ in range(steps)]


def train(torch, model, data) -> list:
    """SGD steps over ``data``; the parameters after, flattened."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in data:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return torch.cat([p.detach().flatten() for p in model.parameters()]).tolist()


def table(t) -> list:
    return sorted((e.to_dict() for e in t.dispatch_table()), key=lambda d: json.dumps(d["key"], sort_keys=True))


def write(folder: str, rank: int, result: dict) -> None:
    (pathlib.Path(folder) / f"rank{rank}.json").write_text(json.dumps(result))


# ---- the workers -----------------------------------------------------------------------------------------------
def training(rank: int, folder: str) -> None:
    """A converted CNN trains 3 steps under DDP beside the unconverted one: converted before wrapping (its keys
    tuned at the misses) and after (its keys tuned ahead by ``Fleet.prepare``)."""
    torch = start(rank, folder)
    import autotune.fleet
    import autotune.torch as at
    from torch.nn.parallel import DistributedDataParallel as DDP
    log = []
    count_tunings(log)
    data = batches(torch, rank)
    result = {"initial": train(torch, net(torch), []), "reference": train(torch, DDP(net(torch)), data)}
    misses, ahead = tuner("misses", algorithms=algorithms()), tuner("ahead", algorithms=algorithms())
    fleets = {"misses": autotune.fleet.Fleet(misses, timeout=60), "ahead": autotune.fleet.Fleet(ahead, timeout=60)}
    before = DDP(at.convert(net(torch), tuner=misses))
    result["before"] = train(torch, before, data)
    # a last batch of another size, and not the same on both ranks (3 and 2 images): new keys at the misses
    train(torch, before, [(x[:3 - rank], y[:3 - rank]) for x, y in data[:1]])
    after = at.convert(DDP(net(torch)), tuner=ahead)
    x, y = data[0]
    keys = fleets["ahead"].prepare(after, lambda: torch.nn.functional.cross_entropy(after(x), y).backward())
    result["prepared"] = [json.dumps(k.to_dict(), sort_keys=True) for k in keys]
    timed_ahead = len(fleets["ahead"].timed)
    result["after"] = train(torch, after, data)
    result["timed_after_prepare"] = len(fleets["ahead"].timed) - timed_ahead
    ahead.patience = 1                          # past patience, a new shape reuses a tuned one's choice: no round
    train(torch, after, [(x[:2], y[:2]) for x, y in data[:1]])
    result["timed_past_patience"] = len(fleets["ahead"].timed) - timed_ahead
    marked = min(misses.dispatch_table(), key=lambda e: json.dumps(e.key.to_dict(), sort_keys=True))
    marked.provisional, misses._log_name = "marked by the test, on both ranks", "rerace"   # races may mark more
    result["provisional"] = sorted(json.dumps(e.key.to_dict(), sort_keys=True) for e in misses.dispatch_table()
                                   if e.provisional)
    result["reraced"] = sorted(json.dumps(k.to_dict(), sort_keys=True) for k in fleets["misses"].rerace())
    result["tables"] = {"misses": table(misses), "ahead": table(ahead)}
    result["tunings"] = log
    result["intervals"] = [[t.started, t.ended] for f in fleets.values() for t in f.timed]
    result["by_torch"] = at.report(after).to_dict()["by_torch"]
    write(folder, rank, result)


def faults(rank: int, folder: str) -> None:
    """Rank 1 on another machine (its fingerprint's CPU model changed): apart tables, saved into one file. Then,
    on one machine: a candidate raising on rank 1, and every candidate raising there (its keys' tuning fails,
    on every rank that wanted them), during DDP steps; last, rank 1 staying out of a round (the timeout)."""
    torch = start(rank, folder)
    import numpy as np

    import autotune.cache
    import autotune.fleet
    import autotune.torch as at
    from torch.nn.parallel import DistributedDataParallel as DDP
    result, log = {}, []
    count_tunings(log)
    real = autotune.cache.fingerprint
    if rank == 1:
        autotune.cache.fingerprint = lambda: dict(real(), cpu="another CPU")
    apart = tuner("apart", algorithms=algorithms())
    fleet = autotune.fleet.Fleet(apart, timeout=60)
    x, w = np.ones((1, 2, 6, 6), np.float32), np.ones((3, 2, 3, 3), np.float32)
    apart.conv2d(x, w, padding=1)
    apart.conv2d(x[:, :, :5], w, padding=1)
    path = pathlib.Path(folder) / "fleet.json"
    written = fleet.save(path)
    later = tuner("apart", algorithms=algorithms())            # after a restart: a new table, a new key, one file
    again = autotune.fleet.Fleet(later, timeout=60)
    later.conv2d(x[:, :, :4], w, padding=1)
    written = written and again.save(path)
    fresh = autotune.Tuner()
    fresh.load(path)
    both = sorted(table(apart) + table(later), key=lambda d: json.dumps(d["key"], sort_keys=True))
    result["machines"] = {"tunings": [t[1:] for t in log if t[0] == "apart"], "table": both, "written": written,
                          "loaded": table(fresh), "file": json.loads(path.read_text())}
    autotune.cache.fingerprint = real

    for name, chosen in (("failing", algorithms(raising_on=1)), ("doomed", {"im2col": algorithms(1)["im2col"]})):
        t = tuner(name, algorithms=chosen)
        autotune.fleet.Fleet(t, timeout=60)
        model = at.convert(net(torch), tuner=t)
        result[name] = {"params": train(torch, DDP(model), batches(torch, rank, 2)), "table": table(t),
                        "by_torch": at.report(model).to_dict()["by_torch"]}

    alone = tuner("alone", algorithms=algorithms())
    fleet = autotune.fleet.Fleet(alone, timeout=2)
    signal = pathlib.Path(folder) / "rank0-done"
    if rank == 0:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            began = time.monotonic()
            y = alone.conv2d(x, w)
            result["waited"] = time.monotonic() - began
        result["warnings"] = [str(w.message) for w in caught if issubclass(w.category, autotune.fleet.FleetWarning)]
        result["y"] = float(y.sum())
        result["broken"], result["left"] = fleet.broken, alone.fleet is None
        signal.write_text("done")
    else:
        ends = time.monotonic() + 60
        while not signal.exists() and time.monotonic() < ends:
            time.sleep(0.05)
    write(folder, rank, result)
