"""autotune.fleet: one dispatch table for every rank of a torch.distributed job, each key timed once per fleet.

    >>> torch.distributed.init_process_group("gloo")      # torchrun, or torch.multiprocessing.spawn
    >>> model = DistributedDataParallel(autotune.torch.convert(model))
    >>> autotune.benchmark = True
    >>> fleet = autotune.fleet.Fleet()                     # every rank, at once: the default tuner joins
    >>> fleet.prepare(model, lambda: loss_fn(model(x), y).backward())   # optional: the step's keys, split
    >>> ...                                                # train: a miss is timed by one rank, shared by all
    >>> fleet.rerace()                                     # every rank, between epochs: provisional entries
    >>> fleet.save("fleet-table.json")                     # every rank; rank 0 writes each machine's entries

With cuDNN's benchmark mode each of N ranks times every layer itself, N times the work, on cores it may share
with another rank that is timing too, and the ranks may choose differently (their rounding then differs).
Here (``fleet.py``):

- every rank dispatches each key to the same algorithm: the entries are exchanged as the JSON dicts the cache
  file holds (``Entry.to_dict``) over torch.distributed (``exchange.py``: a gloo group of the fleet's own, every
  collective bounded by ``timeout``);
- each key is timed by one rank; the keys ``prepare`` collects are split across ranks and nodes, so N nodes
  tune a model in about 1/N of the time; ranks on one node take turns (they share its cores, and a race timed
  beside another is a race of contention) (``plan.py``);
- ranks whose machine fingerprints differ (``autotune.cache.fingerprint``) keep apart tables;
- a miss during training (a new batch size; ``patience``, counted alike on every rank) is one round among all
  ranks, as a miss is in one process; every rank must run the same convolutions in the same order, as
  DistributedDataParallel's ranks do, with the same flags;
- provisional entries (raced while the cores were shared) are raced again by ``fleet.rerace()``, at a point
  every rank reaches, split across the ranks (the Tuner's own re-race on a quiet reading is off in a fleet);
- ``save`` writes every machine's entries into one cache file from rank 0; each rank loads it as usual and
  takes its own machine's entries;
- where no fleet can be made (no process group, no gloo) ``Fleet`` raises ``FleetError``, and
  ``join(..., fallback=True)`` warns and returns None instead: each rank tunes alone. A collective that fails
  or times out (a rank gone or stuck) warns (``FleetWarning``) and each rank tunes alone from then on.

Importing this package imports torch (``torch.distributed``); ``import autotune`` alone never does.
"""
from .exchange import FleetBroken, FleetError, node_id
from .fleet import Fleet, FleetWarning, Timed, join

__all__ = ["Fleet", "FleetError", "FleetBroken", "FleetWarning", "Timed", "join", "node_id"]
