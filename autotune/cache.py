"""The persistent cache: a JSON file (never pickle: loading it runs no code).

    {"schema": 2, "machines": {"<id>": {fingerprint}}, "entries": [{"machine": "<id>", "version": "0.1.0",
                                                                    "entry": {Entry.to_dict()}}, ...]}

An entry is used only where its machine fingerprint (CPU model, cores, BLAS, numpy/numba versions, GPU
names) and library version are this process's; the others stay in the file, untouched.

Files are never lost, and a convolution never fails for want of a cache:

- ``problem(path)`` says, before any work, why ``path`` cannot be a cache (a directory, a missing folder, a
  folder this process cannot write, a file that is not an autotune cache of this schema), or None.
- A file the cache cannot read, that is not a cache (empty, corrupt, truncated, other JSON) or that another
  schema wrote (schema 1 keys had no pass) is never overwritten and never misread: ``load`` gives no entries,
  ``save`` refuses and writes nothing. We refuse rather than write beside it, so that one path means one
  file; the message names the path and the fix (move the file away, or choose another path).
- Every problem is a ``UserWarning`` naming the path, given once per path and reason (a tuner saves after
  each tuning: it does not repeat itself), and ``save`` then returns False; the in-memory table is unchanged.
- Saving takes an exclusive lock on a hidden file in the system's temporary folder, named by a hash of the
  cache's real path (nothing is left beside the cache), re-reads the file, merges, writes a temporary file in
  the same folder and renames it over the old one: two processes saving at once lose no entry, and a reader
  never sees half a file.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import platform
import sys
import tempfile
import warnings

import numba
import numpy as np

import convalgos

from .table import Entry

#: 2: keys carry the pass (``op``). A file of another schema is reported and left alone.
SCHEMA = 2

_reported: set = set()        # (path, reason) already warned about


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _blas() -> str:
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        return f"{blas.get('name', '?')} {blas.get('version', '?')}"
    except Exception:  # show_config's layout is not a stable API
        return "unknown"


def _gpus() -> list:
    """GPU names, asked of CuPy only when the program already imported it."""
    cupy = sys.modules.get("cupy")
    try:
        return [cupy.cuda.runtime.getDeviceProperties(i)["name"].decode()
                for i in range(cupy.cuda.runtime.getDeviceCount())] if cupy else []
    except Exception:
        return []


def fingerprint() -> dict:
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "usable_cores": len(os.sched_getaffinity(0)),
            "blas": _blas(), "numpy": np.__version__, "numba": numba.__version__, "gpus": _gpus()}


def machine_id(fp: dict) -> str:
    return hashlib.sha1(json.dumps(fp, sort_keys=True).encode()).hexdigest()[:12]


# ---- reading and checking --------------------------------------------------------------------------------
class NotACache(ValueError):
    """The file exists but is not an autotune cache this version can read; it must not be overwritten."""


def _read(path) -> dict:
    """The file's content (an empty cache when it is absent); NotACache when it cannot be read or is not one."""
    empty = {"schema": SCHEMA, "machines": {}, "entries": [], "odd": []}
    if not os.path.lexists(path):
        return empty
    if os.path.isdir(path):
        raise NotACache("it is a directory")
    try:
        with open(path, "rb") as f:
            text = f.read()
    except OSError as e:
        raise NotACache(f"it cannot be read ({e.strerror or e})") from None
    if not text.strip():
        raise NotACache("the file is empty")
    try:
        data = json.loads(text)
    except (ValueError, UnicodeDecodeError) as e:
        raise NotACache(f"it is not valid JSON, corrupt or truncated ({e})") from None
    if not isinstance(data, dict) or "schema" not in data:
        raise NotACache("it is JSON but not an autotune cache (no 'schema')")
    if data["schema"] != SCHEMA:
        raise NotACache(f"it is an autotune cache of schema {data['schema']!r}, and this version reads "
                        f"schema {SCHEMA} only")
    if not isinstance(data.get("machines"), dict) or not isinstance(data.get("entries"), list):
        raise NotACache("it has no 'machines' mapping or no 'entries' list")
    data["odd"] = [r for r in data["entries"] if not _well_formed(r)]     # kept verbatim, never dropped
    data["entries"] = [r for r in data["entries"] if _well_formed(r)]
    return data


def writable_problem(path) -> str | None:
    """Why a file cannot be written at ``path`` (a directory, no such folder, a folder not writable), or None."""
    path = _abs(path)
    folder = os.path.dirname(path)
    if os.path.isdir(path):
        return "it is a directory"
    if not os.path.isdir(folder):
        return f"its folder {folder} does not exist"
    try:                                # a real probe: access() says yes to root, even in /proc
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".autotune-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        return f"its folder {folder} is not writable ({e.strerror or e})"
    return None


def problem(path) -> str | None:
    """Why ``path`` cannot be used as a cache file (read and saved), or None when it can."""
    path = _abs(path)
    found = writable_problem(path)
    if found is None:
        try:
            _read(path)
        except NotACache as e:
            found = str(e)
    return found


def _abs(path) -> str:
    return os.path.abspath(os.path.expanduser(os.fspath(path)))


def _report(path, reason, consequence) -> None:
    """One warning per path and reason."""
    if (path, reason) in _reported:
        return
    _reported.add((path, reason))
    warnings.warn(f"autotune cache {path}: {reason}; {consequence}", UserWarning, stacklevel=4)


_LEFT_ALONE = ("not used and not overwritten (the tuning table stays in memory): move the file away or "
               "choose another cache path")


def _well_formed(raw) -> bool:
    return (isinstance(raw, dict) and isinstance(raw.get("machine"), str) and isinstance(raw.get("version"), str)
            and isinstance(raw.get("entry"), dict) and "key" in raw["entry"])


def _raw_key(raw: dict):
    return raw["machine"], raw["version"], json.dumps(raw["entry"]["key"], sort_keys=True)


def merge_raw(old: list, new: list) -> list:
    """Raw entries of both, ``new`` winning where both hold the same machine, version and key."""
    merged = {_raw_key(r): r for r in old}
    merged.update({_raw_key(r): r for r in new})
    return list(merged.values())


def load(path) -> tuple[list, list, list]:
    """(entries usable here, raw entries of other machines or versions, notes for the report)."""
    path = _abs(path)
    try:
        data = _read(path)
    except NotACache as e:
        _report(path, str(e), _LEFT_ALONE)
        return [], [], [f"{path}: {e}; not used"]
    here, version = machine_id(fingerprint()), convalgos.__version__
    usable, foreign, bad = [], [], len(data["odd"])
    for raw in data["entries"]:
        try:
            mine = raw["machine"] == here and raw["version"] == version
            entry = Entry.from_dict(raw["entry"]) if mine else None
        except (KeyError, TypeError, ValueError):
            bad += 1
            continue
        if mine:
            usable.append(entry)
        else:
            foreign.append(raw)
    foreign = [dict(r, fingerprint=data["machines"].get(r["machine"])) for r in foreign]
    notes = []
    if foreign:
        notes.append(f"{path}: {len(foreign)} entries from another machine or library version not used")
    if bad:
        _report(path, f"{bad} malformed entries", "not used (kept in the file)")
        notes.append(f"{path}: {bad} malformed entries not used")
    return usable, foreign, notes


# ---- saving ----------------------------------------------------------------------------------------------
def lock_path(path) -> str:
    """The hidden lock file for the cache at ``path``: in the system's temporary folder, never beside it."""
    digest = hashlib.sha1(os.path.realpath(_abs(path)).encode()).hexdigest()[:16]
    return os.path.join(tempfile.gettempdir(), f".autotune-cache-{digest}.lock")


def _open_lock(path) -> int:
    try:
        return os.open(path, os.O_RDONLY | os.O_CREAT, 0o666)
    except PermissionError:           # made by another user in a sticky /tmp: reading is enough to flock
        return os.open(path, os.O_RDONLY)


def save(path, entries: list, foreign: list) -> bool:
    """Merge ``entries`` (this machine's) and ``foreign`` raw entries into the file at ``path``.

    True when written. False, after one warning naming the path and the reason, when the path cannot hold
    a cache (no such folder, a directory, a read-only place, a file that is not a cache): nothing is written.
    """
    path = _abs(path)
    reason = writable_problem(path)
    if reason is not None:
        _report(path, reason, "tunings not saved (the table stays in memory)")
        return False
    fp = fingerprint()
    here = machine_id(fp)
    mine = [{"machine": here, "version": convalgos.__version__, "entry": e.to_dict()} for e in entries]
    try:
        lock = _open_lock(lock_path(path))
    except OSError as e:
        _report(path, f"its lock {lock_path(path)} cannot be opened ({e.strerror or e})", "tunings not saved")
        return False
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            data = _read(path)
        except NotACache as e:
            _report(path, str(e), _LEFT_ALONE)
            return False
        machines = dict(data["machines"])
        for raw in foreign:
            if raw.get("fingerprint"):
                machines.setdefault(raw["machine"], raw["fingerprint"])
        machines[here] = fp
        plain = [{k: r[k] for k in ("machine", "version", "entry")} for r in foreign]
        merged = merge_raw(merge_raw(data["entries"], plain), mine) + data["odd"]
        return _write(path, {"schema": SCHEMA, "machines": machines, "entries": merged})
    finally:
        os.close(lock)


def _write(path, doc: dict) -> bool:
    """Write ``doc`` through a temporary file in the same folder, renamed over ``path`` (atomic)."""
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix="." + os.path.basename(path) + ".")
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        return True
    except BaseException as e:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        if not isinstance(e, OSError):
            raise
        _report(path, f"it cannot be written ({e.strerror or e})", "tunings not saved (the table stays in memory)")
        return False
