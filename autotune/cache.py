"""The persistent cache: a JSON file (never pickle: loading it runs no code).

    {"schema": 1, "machines": {"<id>": {fingerprint}}, "entries": [{"machine": "<id>", "version": "0.1.0",
                                                                    "entry": {Entry.to_dict()}}, ...]}

An entry is used only where its machine fingerprint (CPU model, cores, BLAS, numpy/numba versions, GPU
names) and library version are this process's; the others stay in the file, untouched. A file that is
corrupt, truncated or of another schema gives a warning and no entries. Saving takes an exclusive lock on
``path + ".lock"``, re-reads the file, merges, writes a temporary file in the same folder and renames it over
the old one: two processes saving at once lose no entry, and a reader never sees half a file.
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

SCHEMA = 1


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


def _read(path) -> dict:
    """The file's content, or an empty cache (with a warning) when it is absent, corrupt or foreign."""
    empty = {"schema": SCHEMA, "machines": {}, "entries": []}
    if not os.path.exists(path):
        return empty
    try:
        with open(path) as f:
            data = json.load(f)
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise ValueError(f"schema {data.get('schema') if isinstance(data, dict) else None!r}, "
                             f"expected {SCHEMA}")
        if not isinstance(data.get("machines"), dict) or not isinstance(data.get("entries"), list):
            raise ValueError("no 'machines' mapping or 'entries' list")
        data["entries"] = [r for r in data["entries"] if _well_formed(r)]
        return data
    except (OSError, ValueError) as e:
        warnings.warn(f"autotune cache {path} not used ({e}); starting with an empty table", stacklevel=3)
        return empty


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
    data = _read(path)
    here, version = machine_id(fingerprint()), convalgos.__version__
    usable, foreign, bad = [], [], 0
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
        warnings.warn(f"autotune cache {path}: {bad} malformed entries not used", stacklevel=2)
        notes.append(f"{path}: {bad} malformed entries not used")
    return usable, foreign, notes


def save(path, entries: list, foreign: list) -> None:
    """Merge ``entries`` (this machine's) and ``foreign`` raw entries into the file at ``path``."""
    path = os.path.abspath(path)
    fp = fingerprint()
    here = machine_id(fp)
    mine = [{"machine": here, "version": convalgos.__version__, "entry": e.to_dict()} for e in entries]
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = _read(path)
        machines = dict(data["machines"])
        for raw in foreign:
            if raw.get("fingerprint"):
                machines.setdefault(raw["machine"], raw["fingerprint"])
        machines[here] = fp
        plain = [{k: r[k] for k in ("machine", "version", "entry")} for r in foreign]
        merged = merge_raw(merge_raw(data["entries"], plain), mine)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=os.path.basename(path) + ".")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump({"schema": SCHEMA, "machines": machines, "entries": merged}, f, indent=1)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
