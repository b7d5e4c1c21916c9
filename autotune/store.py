"""The tuner's table: its entries by key, the hit and miss counters per pass, and the JSON cache file's entries
of other machines or versions, kept so that saving never drops them. Every access holds one lock."""
from __future__ import annotations

import threading

from convalgos import PASSES

from . import cache
from .table import CacheInfo, DispatchTable, Entry, Key, PassInfo


class Table:
    """Entries by key, with the counters ``cache_info`` reports."""

    def __init__(self):
        self._entries: dict[Key, Entry] = {}
        self._foreign, self._notes = [], []   # cache-file entries of another machine or version, kept for saving
        self._counts = {op: [0, 0, 0.0] for op in PASSES}     # hits, misses, tuning seconds
        self._reraces = 0
        self._lock = threading.Lock()

    def hit(self, key: Key, usable) -> Entry | None:
        """The entry of ``key`` when ``usable(entry)`` holds (counted as a hit), else None."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and usable(entry):
                self._counts[key.op][0] += 1
                return entry
            return None

    def get(self, key: Key) -> Entry | None:
        """The entry of ``key`` (None when there is none), not counted as a hit."""
        with self._lock:
            return self._entries.get(key)

    def store(self, entry: Entry) -> Entry:
        """Keep ``entry`` under its key (counted as a miss, with its tuning seconds)."""
        with self._lock:
            self._entries[entry.key] = entry
            counts = self._counts[entry.key.op]
            counts[1] += 1
            counts[2] += entry.tuning_seconds
        return entry

    def rerace(self, entry: Entry) -> Entry:
        """Replace a provisional entry by the one its re-race made (counted as a re-race, with its seconds)."""
        with self._lock:
            self._entries[entry.key] = entry
            self._counts[entry.key.op][2] += entry.tuning_seconds
            self._reraces += 1
        return entry

    def fell_back(self, entry: Entry, failed: str, name: str, why: str) -> None:
        """``failed``, the choice of ``entry``, raised at a call that ``name`` then served: ``name`` becomes the
        choice, and ``why`` is recorded."""
        with self._lock:
            entry.skipped[failed] = why
            entry.algo = name

    def entries(self, keep) -> list:
        """The entries whose ``keep(key, entry)`` holds."""
        with self._lock:
            return [e for k, e in self._entries.items() if keep(k, e)]

    def info(self, layers) -> CacheInfo:
        with self._lock:
            return self._info(layers)

    def _info(self, layers) -> CacheInfo:
        passes = {op: PassInfo(h, m, sum(k.op == op for k in self._entries), s)
                  for op, (h, m, s) in self._counts.items()}
        return CacheInfo(sum(p.hits for p in passes.values()), sum(p.misses for p in passes.values()),
                         len(self._entries), sum(p.tuning_seconds for p in passes.values()), passes, layers,
                         self._reraces, sum(bool(e.provisional) for e in self._entries.values()))

    def report(self, layers) -> DispatchTable:
        with self._lock:
            return DispatchTable(self._entries.values(), self._info(layers), self._notes)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._counts = {op: [0, 0, 0.0] for op in PASSES}
            self._reraces = 0

    def save(self, path) -> None:
        """Write the benchmark entries to ``path``, merged with what the file holds (atomic, locked)."""
        with self._lock:
            entries = [e for e in self._entries.values() if e.source == "benchmark"]
            foreign = list(self._foreign)
        cache.save(path, entries, foreign)

    def load(self, path) -> None:
        """Add the usable entries of ``path``; the others are reported and kept for saving."""
        entries, foreign, notes = cache.load(path)
        with self._lock:
            for entry in entries:
                self._entries[entry.key] = entry
            self._foreign = cache.merge_raw(self._foreign, foreign)
            self._notes = [n for n in self._notes if not n.startswith(f"{path}:")] + notes
