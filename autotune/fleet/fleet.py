"""``Fleet``: a tuner joined to every rank of a torch.distributed job, so each key is timed once per fleet.

Rounds (``plan.py`` says who times what, when): the ranks all-gather the keys they want, each distinct key of
a machine group is given to one rank, the owners time theirs slot by slot (one rank per node at a time), and
after each slot the entries (``Entry.to_dict``, JSON) are all-gathered; every rank stores its group's entries
as decoded from the same JSON, so the tables are identical. A round is entered by every rank at once:

- a miss (``tune``, called by ``Tuner._tune`` in benchmark mode): ranks running the same model in lockstep
  (DistributedDataParallel) miss the same keys in the same order, so they all come with their key; keys that
  differ between ranks (a different last batch) are all tuned in the same round, each by a rank that has it;
- ``prepare(model, step)``: the keys of one run of ``step`` (recorded with benchmark off, on a scratch tuner),
  split across ranks and nodes in one round, each timed on random operands of its shape (``operands.py``);
- ``rerace()``: the provisional entries (chosen on runs that waited for a CPU), raced again in one round at a
  point every rank reaches. The Tuner re-races such an entry on its own only without a fleet: its trigger is
  its own machine's reading, which another rank does not share.

Faults: a candidate that raises is skipped by ``tuning.tune`` as in one process; a tuning that raises sends
its error instead of an entry, and every rank that wanted that key raises it (the torch bridge then computes
the pass with torch's conv). A collective that fails or times out breaks the fleet: a ``FleetWarning`` says
why, the tuner leaves it, and from then on each rank tunes alone, as without a fleet.
"""
from __future__ import annotations

import os
import time
import warnings
from collections import namedtuple

import convalgos
from autotune import cache, tuning
from autotune.table import Entry, Key
from autotune.tuner import ENV

from .exchange import Channel, FleetBroken, FleetError, node_id
from .operands import device_of_key, operands
from .plan import Member, make_plan

#: one key timed on this rank: ``started`` and ``ended`` on ``time.monotonic()`` (the same clock in every
#: process of a machine).
Timed = namedtuple("Timed", "key started ended")


class FleetWarning(UserWarning):
    """The fleet broke (a rank failed or did not come in time): each rank now tunes alone."""


class Fleet:
    """``tuner`` (default: autotune's module-level one) joined to every rank of the default process group.

    Made by every rank at once (a collective). ``timeout``: seconds any one collective of the fleet may wait
    (a slot waits for one key's tuning on another rank: JIT compiling included, allow for it). ``node``: the
    name of this rank's machine (default ``exchange.node_id()``); ranks of one node never time at once.
    Attributes: ``rank``, ``members`` (``plan.Member`` per rank), ``owners`` (key -> the rank that timed it,
    for this rank's group), ``timed`` (``Timed`` per key this rank timed), ``broken`` (why, or None).
    """

    def __init__(self, tuner=None, *, timeout: float = 600.0, node: str | None = None):
        import autotune
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if node is not None and (not isinstance(node, str) or not node):
            raise ValueError(f"node must be a non-empty str or None, got {node!r}")
        self.tuner = autotune.default_tuner() if tuner is None else tuner
        if self.tuner.fleet is not None:
            raise ValueError("tuner is already in a fleet: call its fleet.leave() first")
        self.channel = Channel(float(timeout))
        self.rank = self.channel.rank
        fingerprint = cache.fingerprint()
        try:
            hello = self.channel.gather({"node": node or node_id(), "machine": cache.machine_id(fingerprint),
                                         "version": convalgos.__version__, "fingerprint": fingerprint})
        except FleetBroken as e:
            raise FleetError(f"autotune.fleet: the ranks did not all come: {e}") from e
        #: group -> (machine id, library version, fingerprint): ranks of one group share entries
        self.groups = {f"{h['machine']} {h['version']}": (h["machine"], h["version"], h["fingerprint"])
                       for h in hello}
        self.members = [Member(r, h["node"], f"{h['machine']} {h['version']}") for r, h in enumerate(hello)]
        self.load = [0] * len(self.members)
        self.owners, self.timed, self.broken = {}, [], None
        self.tuner.fleet = self

    @property
    def group(self) -> str:
        """This rank's group: its machine id and library version."""
        return self.members[self.rank].group

    def leave(self) -> None:
        """Detach the tuner: its misses are tuned on this rank alone again."""
        if self.tuner.fleet is self:
            self.tuner.fleet = None

    # ---- a miss ----------------------------------------------------------------------------------------------
    def tune(self, tuner, key: Key, a, b, device, registry: dict, out, timer) -> Entry:
        """``tuning.tune``'s answer for ``key``, timed by one rank of the fleet (a round: every rank calls it)."""
        try:
            found = self._round(tuner, [key], {key: (a, b, device, registry, out, timer)})
        except FleetBroken:
            return tuning.tune(tuner, key, a, b, device, registry, out, timer)
        _store(tuner, {k: e for k, e in found.items() if k != key})
        if isinstance(found[key], str):
            raise RuntimeError(found[key])
        return found[key]

    # ---- ahead of training -------------------------------------------------------------------------------------
    def prepare(self, model, step) -> list:
        """Tune, split across the fleet, every key one run of ``step()`` calls through ``model``'s converted
        layers of this tuner (``step`` runs the forward and backward passes; its gradients are left in the
        parameters, to be zeroed as before any step). Every rank calls it. Returns this rank's keys the round
        tuned; keys the table holds already, and new shapes past ``patience``, are left to the misses."""
        from autotune.torch.module import Conv2d
        if not callable(getattr(model, "modules", None)):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        if not callable(step):
            raise TypeError(f"step must be a callable running the forward and backward passes, got {step!r}")
        layers = [m for m in model.modules() if isinstance(m, Conv2d) and self._tuner_of(m) is self.tuner]
        scratch = self._scratch()
        saved = [m.tuner for m in layers]
        for m in layers:
            m.tuner = scratch
        try:
            step()
        finally:
            for m, t in zip(layers, saved):
                m.tuner = t
        keys = [e.key for e in scratch.dispatch_table() if self._needs(e.key)]
        try:
            found = self._round(self.tuner, keys, {})
        except FleetBroken:
            return []
        _store(self.tuner, found)
        self._save_cache(found)
        return [k for k in keys if isinstance(found.get(k), Entry)]

    def rerace(self) -> list:
        """Race again, split across the fleet, the tuner's provisional entries (chosen on runs that waited for a
        CPU). Without a fleet the Tuner re-races such an entry at a hit once its own machine looks quiet; in a
        fleet one rank's reading is not the others', so the ranks re-race together, here, at a point every rank
        reaches (between epochs, say), on random operands of each key's shape (``operands.py``). Each new entry
        replaces the old on every rank of the group (``reraced`` counted, provisional again only if its runs
        waited too). Returns the keys raced."""
        old = {e.key: e for e in self.tuner.dispatch_table() if e.provisional and e.source == "benchmark"}
        try:
            found = self._round(self.tuner, list(old), {})
        except FleetBroken:
            return []
        for key, entry in found.items():
            if isinstance(entry, Entry) and key in old:
                entry.reraced = old[key].reraced + 1
                self.tuner.table.rerace(entry)
        self._save_cache(found)
        return [k for k in old if isinstance(found.get(k), Entry)]

    # ---- the table on disk -------------------------------------------------------------------------------------
    def save(self, path) -> bool:
        """Write every group's benchmark entries into the cache file at ``path``, from rank 0 alone, merged with
        what the file holds (``cache.save``: per machine fingerprint, each machine's entries used only there).
        Every rank calls it; all return whether it was written. Reload with ``autotune.load`` (or
        ``Tuner.load``) on each rank, as without a fleet."""
        leader = min(m.rank for m in self.members if m.group == self.group)
        mine = [e for e in self.tuner.dispatch_table() if e.source == "benchmark"]
        try:
            sent = self.channel.gather([e.to_dict() for e in mine] if self.rank == leader else None)
            written = False
            if self.rank == 0:
                foreign = [{"machine": self.groups[self.members[r].group][0], "entry": e,
                            "version": self.groups[self.members[r].group][1],
                            "fingerprint": self.groups[self.members[r].group][2]}
                           for r, entries in enumerate(sent) if entries and self.members[r].group != self.group
                           for e in entries]
                written = cache.save(path, mine, foreign)
            return bool(self.channel.gather(written)[0])
        except FleetBroken as e:
            self._break(str(e))
            raise

    # ---- one round ---------------------------------------------------------------------------------------------
    def _round(self, tuner, keys: list, local: dict) -> dict:
        """Key -> Entry (or the error text) for every key of this rank's group that the round timed."""
        try:
            wanted = [[Key.from_dict(k) for k in ks] for ks in self.channel.gather([k.to_dict() for k in keys])]
            plan = make_plan(self.members, wanted, self.load)
            found = {}
            for slot in plan.slots:
                key = slot.get(self.rank)
                sent = self._time(tuner, key, local) if key is not None else None
                for rank, record in enumerate(self.channel.gather(sent)):
                    if record is None or self.members[rank].group != self.group:
                        continue
                    self.owners[slot[rank]] = rank
                    found[slot[rank]] = record["error"] if "error" in record else Entry.from_dict(record["entry"])
        except FleetBroken as e:
            self._break(str(e))
            raise
        return found

    def _time(self, tuner, key: Key, local: dict) -> dict:
        """{"entry": dict} for ``key`` timed here (on the call's operands when it is this rank's miss), or
        {"error": text}."""
        started = time.monotonic()
        try:
            if key in local:
                a, b, device, registry, out, timer = local[key]
            else:
                device = device_of_key(tuner, key)
                (a, b), registry, out = operands(key, device), _registry(tuner, device), None
                timer = tuner.timer or device.timer
            return {"entry": tuning.tune(tuner, key, a, b, device, registry, out, timer).to_dict()}
        except Exception as e:  # noqa: BLE001 - the others must hear of it, or they wait for this rank
            return {"error": f"rank {self.rank} could not tune {key}: {type(e).__name__}: {e}"}
        finally:
            self.timed.append(Timed(key, started, time.monotonic()))

    def _break(self, why: str) -> None:
        if self.broken is None:
            self.broken = why
            warnings.warn(f"autotune.fleet broke: {why}. This rank leaves the fleet and tunes alone from now on "
                          f"(its table may then differ from the other ranks')", FleetWarning, stacklevel=4)
        self.leave()

    # ---- helpers -----------------------------------------------------------------------------------------------
    def _save_cache(self, found: dict) -> None:
        path = cache_file(self.tuner)
        if path and any(isinstance(e, Entry) for e in found.values()):
            self.tuner.save(path)

    def _tuner_of(self, layer):
        import autotune
        return autotune.default_tuner() if layer.tuner is None else layer.tuner

    def _scratch(self):
        """A tuner like ours with benchmark off: it records the keys a step calls, running the heuristic's
        choices."""
        from autotune import Tuner
        t = self.tuner
        return Tuner(t.algorithms, devices=t.devices, deterministic=t.deterministic,
                     workspace_limit=t.workspace_limit, heuristics=t.heuristics)

    def _needs(self, key: Key) -> bool:
        """Would a call of ``key`` be timed now (benchmark on, no usable entry, within patience)?"""
        t = self.tuner
        entry = t.table.get(key)
        if not t.benchmark or (entry is not None and entry.source != "heuristic"):
            return False
        return t.patience is None or t.shapes.shapes(key) < t.patience or t.shapes.knows(key)


def _store(tuner, found: dict) -> None:
    """Keep the entries of ``found`` (not the errors) as tuned here: in the table and the layers' shape log."""
    for entry in found.values():
        if isinstance(entry, Entry):
            tuner.table.store(entry)
            tuner.shapes.record(entry)


def _registry(tuner, device) -> dict:
    return device.algorithms if tuner.algorithms is None else tuner.algorithms


def cache_file(tuner):
    """The tuner's cache file (its ``cache_path``, or AUTOTUNE_CACHE for ``tuner.ENV``), or None."""
    return os.environ.get("AUTOTUNE_CACHE") if tuner.cache_path == ENV else tuner.cache_path


def join(tuner=None, *, timeout: float = 600.0, node: str | None = None, fallback: bool = False):
    """A ``Fleet`` of ``tuner``; with ``fallback=True``, where no fleet can be made (no process group, no gloo),
    None after a ``FleetWarning``: each rank then tunes alone, as without a fleet."""
    try:
        return Fleet(tuner, timeout=timeout, node=node)
    except FleetError as e:
        if not fallback:
            raise
        warnings.warn(f"{e}. Each rank tunes alone.", FleetWarning, stacklevel=2)
        return None
