"""The Tuner's flags, as cudnn.benchmark's: each checked when set (a wrong value or a misspelt name raises), and
set for a block with ``Tuner.flags(...)``, the old values back on exit.

- ``benchmark``: time every candidate once per key and keep the fastest (off: the heuristic's first choice);
- ``deterministic``: only bitwise-repeatable algorithms (a key field: each setting has its own entries);
- ``benchmark_limit``: race only the heuristic's best N; ``workspace_limit``: bytes a candidate may need;
- ``patience``: after this many tuned shapes of one layer, a new shape reuses the nearest one's choice.
"""
from __future__ import annotations

import contextlib

import numpy as np


def _check_count(name, value, least):
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least):
        raise ValueError(f"{name} must be None or an int >= {least}, got {value!r}")
    return value


def _check_bool(name, value):
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return bool(value)


FLAG_CHECKS = {"benchmark": _check_bool, "deterministic": _check_bool,
               "benchmark_limit": lambda n, v: _check_count(n, v, 1),
               "workspace_limit": lambda n, v: _check_count(n, v, 0),
               "patience": lambda n, v: _check_count(n, v, 1)}


@contextlib.contextmanager
def flags_set(owner, **flags):
    """Set ``flags`` on ``owner`` for the ``with`` block; the old values come back on exit, exception or not."""
    unknown = set(flags) - set(FLAG_CHECKS)
    if unknown:
        raise TypeError(f"unknown flag(s) {sorted(unknown)}; flags are {list(FLAG_CHECKS)}")
    old = {name: getattr(owner, name) for name in flags}
    try:
        for name, value in flags.items():
            setattr(owner, name, value)
        yield owner
    finally:
        for name, value in old.items():
            object.__setattr__(owner, name, value)
