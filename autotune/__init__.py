"""autotune: a cudnn.benchmark-style dispatcher over convalgos, done in the open.

    >>> import autotune
    >>> autotune.benchmark = True                 # like torch.backends.cudnn.benchmark
    >>> y = autotune.conv2d(x, w, padding=1)      # first call for this key: every algorithm timed and checked
    >>> dx = autotune.conv2d_input(x.shape, w, dy, padding=1)     # each pass is tuned on its own key
    >>> dw = autotune.conv2d_weight(x, w.shape, dy, padding=1)
    >>> print(autotune.dispatch_table())          # what was measured, what was chosen, and why

The module-level functions and flags (``benchmark``, ``deterministic``, ``benchmark_limit``,
``workspace_limit``, ``patience``) use one default ``Tuner``; make more ``Tuner`` objects for more tables. A
misspelt flag (``autotune.benchmrk = True``) raises AttributeError. With ``AUTOTUNE_CACHE=path`` the default
table is loaded from that JSON file at first use and saved to it after each new tuning.

The layers, models and tools are submodules, imported at their first use, so ``import autotune`` then
``autotune.models.resnet18()`` works without importing them all up front: ``nn``, ``models``, ``optim``,
``data``, ``train``, ``profile``. Imported eagerly they cost 17 ms together (11 of them ``nn``'s Numba kernel
declarations) over the 365 ms of ``import autotune`` (fresh processes, min of 7, 2026-12-03); lazily, nothing
until used. Neither way imports torch or CuPy.
"""
import importlib
import sys
import types

from convalgos.arrays import simulator_enabled

from .table import CacheInfo, DispatchTable, Entry, Key
from .flags import FLAG_CHECKS
from .tuner import ENV, Tuner
from .graph import CaptureError
from . import graph as _graph

_default = Tuner(cache_path=ENV)

conv2d = _default.conv2d
conv2d_input = _default.conv2d_input
conv2d_weight = _default.conv2d_weight
flags = _default.flags
dispatch_table = _default.dispatch_table
cache_info = _default.cache_info
clear = _default.clear
save = _default.save
load = _default.load


def default_tuner() -> Tuner:
    """The Tuner behind the module-level functions and flags."""
    return _default


_simulated = []


def simulated_gpu_tuner() -> Tuner:
    """The Tuner of convs on the simulated GPU (a model moved to "cuda" under ``NUMBA_ENABLE_CUDASIM=1``: the
    GPU registry on NumPy arrays, ``devices.SimulatedGpuDevice``), with the module-level flags."""
    if not _simulated:
        from .devices import SimulatedGpuDevice
        _simulated.append(Tuner(devices=[SimulatedGpuDevice()]))
    for name in FLAG_CHECKS:
        if getattr(_simulated[0], name) != getattr(_default, name):
            setattr(_simulated[0], name, getattr(_default, name))
    return _simulated[0]


def cuda_graph(step=None, *, tuners=None, patience=None, warn_after=8):
    """``autotune.graph.cuda_graph``: ``step`` replayed as a CUDA graph per input shape, its convs' tuners (by
    default this module's, and the simulated GPU's under the simulator) put in graph mode."""
    if tuners is None:
        tuners = [_default] + ([simulated_gpu_tuner()] if simulator_enabled() else [])
    return _graph.cuda_graph(step, tuners=tuners, patience=patience, warn_after=warn_after)


#: the submodules imported at their first use as attributes (``autotune.models``).
SUBMODULES = ("nn", "models", "optim", "data", "train", "profile")


def _flag(name):
    return property(lambda module: getattr(_default, name), lambda module, value: setattr(_default, name, value))


class _FlagModule(types.ModuleType):
    """The module's flags are the default Tuner's, so ``autotune.benchmark = True`` sets them (validated), and
    a name that is neither a flag nor already in the module is refused rather than silently added."""

    benchmark = _flag("benchmark")
    deterministic = _flag("deterministic")
    benchmark_limit = _flag("benchmark_limit")
    workspace_limit = _flag("workspace_limit")
    patience = _flag("patience")

    def __getattr__(self, name):                 # called only for a name not found the usual way
        if name in SUBMODULES:
            return importlib.import_module(f"{__name__}.{name}")
        raise AttributeError(f"module 'autotune' has no attribute {name!r}")

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(SUBMODULES))

    def __setattr__(self, name, value):
        if name not in FLAG_CHECKS and name not in self.__dict__ and not isinstance(value, types.ModuleType):
            raise AttributeError(f"module 'autotune' has no flag {name!r}; its flags are {list(FLAG_CHECKS)}")
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _FlagModule

__all__ = ["conv2d", "conv2d_input", "conv2d_weight", "flags", "dispatch_table", "cache_info", "clear", "save",
           "load", "Tuner", "Key", "Entry", "CacheInfo", "DispatchTable", "default_tuner", "simulated_gpu_tuner",
           "benchmark", "deterministic", "benchmark_limit", "workspace_limit", "patience", "cuda_graph", "CaptureError"]
