"""autotune: a cudnn.benchmark-style dispatcher over convalgos, done in the open.

    >>> import autotune
    >>> autotune.benchmark = True                 # like torch.backends.cudnn.benchmark
    >>> y = autotune.conv2d(x, w, padding=1)      # first call for this key: every algorithm timed and checked
    >>> print(autotune.dispatch_table())          # what was measured, what was chosen, and why

The module-level functions and flags use one default ``Tuner``; make more ``Tuner`` objects for more tables.
With ``AUTOTUNE_CACHE=path`` the default table is loaded from that JSON file at first use and saved to it
after each new tuning.
"""
import sys
import types

from .table import CacheInfo, DispatchTable, Entry, Key
from .tuner import ENV, Tuner
from . import gpu  # noqa: F401  (registers the GPU device: CuPy arrays tune on the GPU)

_default = Tuner(cache_path=ENV)

conv2d = _default.conv2d
flags = _default.flags
dispatch_table = _default.dispatch_table
cache_info = _default.cache_info
clear = _default.clear
save = _default.save
load = _default.load


def default_tuner() -> Tuner:
    """The Tuner behind the module-level functions and flags."""
    return _default


def _flag(name):
    return property(lambda module: getattr(_default, name), lambda module, value: setattr(_default, name, value))


class _FlagModule(types.ModuleType):
    """Module attributes ``benchmark``, ``deterministic``, ``benchmark_limit``, ``workspace_limit`` are the
    default Tuner's flags, so ``autotune.benchmark = True`` sets them (and is validated)."""

    benchmark = _flag("benchmark")
    deterministic = _flag("deterministic")
    benchmark_limit = _flag("benchmark_limit")
    workspace_limit = _flag("workspace_limit")


sys.modules[__name__].__class__ = _FlagModule

__all__ = ["conv2d", "flags", "dispatch_table", "cache_info", "clear", "save", "load", "Tuner", "Key", "Entry",
           "CacheInfo", "DispatchTable", "default_tuner", "benchmark", "deterministic", "benchmark_limit",
           "workspace_limit"]
