"""``autotune.cuda_graph(step)``: a training step (forward, loss, backward, SGD) or an eval forward replayed as
one CUDA graph, so that its cost is its kernels' and not the host's that issues them.

    >>> step = autotune.cuda_graph(train_step)       # train_step(x, labels) -> loss, a device array
    >>> for x, labels in batches:
    ...     loss = step(x, labels)                     # 1st call per shape: eager (tunes); 2nd: captured; then replays

Per input shape (the shapes and dtypes of the array arguments, and the other arguments' values):

1. the first call runs eagerly: benchmark mode tunes every conv pass here, where timing is allowed;
2. the second copies the inputs into static buffers and captures the step on a side stream into a CUDA graph
   (CuPy's ``stream.begin_capture()``/``end_capture()``), every allocation served by a private memory pool
   that the graph keeps; the graph is launched once, and its outputs become the static outputs;
3. every later call copies the inputs into the static buffers, launches the graph (about 0.8 us per kernel on
   an H200 against 17-80 us per eager Numba launch) and returns the static outputs (the same arrays at every
   call, overwritten by the next: copy what you keep).

A new shape is captured anew, counted (``captures``) and logged at INFO as a re-tuning is; past
``warn_after`` shapes a ``RetuningWarning`` says what the graphs hold, and ``patience=N`` runs any shape after
the N-th eagerly instead of capturing it. ``graph_bytes`` is the device memory the graphs hold: static
inputs, the private pools and the kept buffers their kernels write (``convalgos.memory.holding``).

What a capture refuses (``CaptureError``, naming the rule), since a graph replays device work and nothing else:

- a host synchronisation inside the step (``.get()``, ``float(loss)``, a NumPy copy of a device array): the
  library's own to-host points check ``refuse_in_capture``, and CuPy's capture errors on a GPU are turned
  into the same error; return the loss as a device array and read it outside the step;
- a tuner miss or a re-timing: a key the eager call did not tune, which is a data-dependent branch (another
  path than the eager call took) or a shape the first call did not see; tune on the eager call;
- an allocation outside the graph's pool: none is left, every allocation during the capture comes from the
  private pool and the kept buffers are pinned by the graph, so a replay never writes memory freed meanwhile.

In the Numba CUDA simulator there is no graph: the capture call and the replays run the step eagerly on the
static buffers under the same checks, so CI tests every rule above. The tuner(s) behind the step are put in
graph mode (``Tuner.graph_mode``): a race then minimises GPU time alone, the host's issue cost being paid once.
"""
from __future__ import annotations

import contextlib
import functools
import logging
import threading
import warnings

from convalgos.arrays import is_cupy_array, simulator_enabled

from .shapes import RetuningWarning

LOG = logging.getLogger("autotune")
MiB = float(1 << 20)


class CaptureError(RuntimeError):
    """A step that a CUDA graph cannot hold: the message names the rule it broke."""


_state = threading.local()

#: the rules, by the name a check passes to ``refuse_in_capture``.
RULES = {
    "host": "a host synchronisation ({what}): a graph replays device work only, and this read would happen "
            "once, at capture. Return the value as a device array and read it outside the step",
    "tuner": "a tuner miss ({what}): the eager call did not tune this key, so the step took another path or "
             "shape at capture (a data-dependent branch?). Tune on the eager call: a graphed step must issue "
             "the same passes on every call",
    "cuda": "CUDA refused an operation while capturing ({what}): a host synchronisation or a blocking "
            "allocation inside the step",
}


def capturing() -> str | None:
    """The name of the step being captured in this thread (None when none is)."""
    return getattr(_state, "step", None)


def refuse_in_capture(rule: str, what: str) -> None:
    """Raise ``CaptureError`` for ``rule`` (a key of ``RULES``) when a capture is under way in this thread:
    the library calls it at the points a graph cannot hold (to-host copies, tuner misses, timing)."""
    step = capturing()
    if step is not None:
        raise CaptureError(f"cuda_graph cannot capture {step}: " + RULES[rule].format(what=what))


@contextlib.contextmanager
def _capture_of(step: str):
    _state.step = step
    try:
        yield
    finally:
        _state.step = None


def _as_capture_error(error: Exception, step: str) -> Exception:
    """CuPy's or the driver's capture errors (cudaErrorStreamCaptureUnsupported, ...Invalidated, ...) as a
    ``CaptureError`` that names the rule; anything else as it is."""
    text = f"{type(error).__name__}: {error}"
    if isinstance(error, CaptureError) or "Capture" not in text and "capturing" not in text:
        return error
    return CaptureError(f"cuda_graph cannot capture {step}: " + RULES["cuda"].format(what=text))


def signature(args, kwargs) -> tuple:
    """What decides a graph: each array argument's type, shape and dtype, and the other arguments' values."""
    def one(v):
        if hasattr(v, "shape") and hasattr(v, "dtype"):
            return type(v).__name__, tuple(v.shape), str(v.dtype)
        try:
            hash(v)
        except TypeError:
            raise TypeError(f"cuda_graph's step takes arrays and hashable values; got {type(v).__name__}") from None
        return v
    return tuple(map(one, args)) + tuple((k, one(v)) for k, v in sorted(kwargs.items()))


class Graph:
    """One captured input shape: its static inputs, outputs, the CUDA graph (None in the simulator), its side
    stream, private pool and the kept buffers it pins."""

    def __init__(self, args, kwargs):
        self.args = [_static_copy(a) for a in args]
        self.kwargs = {k: _static_copy(v) for k, v in kwargs.items()}
        self.outputs, self.graph, self.stream, self.pool, self.kept = None, None, None, None, []

    def copy_in(self, args, kwargs) -> int:
        """Copy the call's arrays into the static inputs; returns how many copies were made."""
        pairs = list(zip(self.args, args)) + [(self.kwargs[k], v) for k, v in kwargs.items()]
        copies = [(static, a) for static, a in pairs if hasattr(static, "shape")]
        for static, a in copies:
            static[...] = a
        return len(copies)

    @property
    def nbytes(self) -> int:
        """Device memory held: static inputs, the private pool and the kept buffers the graph pins."""
        static = sum(a.nbytes for a in list(self.args) + list(self.kwargs.values()) if hasattr(a, "nbytes"))
        pool = self.pool.total_bytes() if self.pool is not None else 0
        return static + pool + sum({id(b): b.nbytes for b in self.kept}.values())


def _static_copy(a):
    return a.copy() if hasattr(a, "shape") and hasattr(a, "copy") else a


class CudaGraph:
    """``step`` captured per input shape (module docstring). ``captures``: how many graphs were captured;
    ``replays``: how many calls replayed one; ``graph_bytes``: the memory the graphs hold; ``refused``:
    signature -> why a shape is run eagerly (its capture was refused, or it came past ``patience``)."""

    def __init__(self, step, *, tuners=(), patience=None, warn_after=8):
        self.step, self.patience, self.warn_after = step, patience, warn_after
        self.name = getattr(step, "__qualname__", repr(step))
        self.tuners = list(tuners)
        for tuner in self.tuners:
            tuner.graph_mode = True
        self.captures, self.replays, self.eager_calls = 0, 0, 0
        self.refused: dict = {}
        self._seen, self._graphs, self._warned = set(), {}, False
        functools.update_wrapper(self, step)

    @property
    def graph_bytes(self) -> int:
        return sum(g.nbytes for g in self._graphs.values())

    def __call__(self, *args, **kwargs):
        key = signature(args, kwargs)
        graph = self._graphs.get(key)
        if graph is not None:
            self.replays += 1
            return self._replay(graph, args, kwargs)
        if key not in self._seen or key in self.refused:
            self._seen.add(key)
            self.eager_calls += 1
            return self.step(*args, **kwargs)
        if self.patience is not None and len(self._graphs) >= self.patience:
            self.refused[key] = f"patience={self.patience}: {len(self._graphs)} shapes captured already"
            LOG.info("cuda_graph %s: input %s runs eagerly (%s)", self.name, key, self.refused[key])
            self.eager_calls += 1
            return self.step(*args, **kwargs)
        return self._capture(key, args, kwargs)

    def _capture(self, key, args, kwargs):
        graph = Graph(args, kwargs)
        try:
            outputs = (self._simulated_capture if _simulated(args, kwargs) else self._gpu_capture)(graph)
        except Exception as error:
            self.refused[key] = str(error)
            converted = _as_capture_error(error, self.name)
            if converted is error:
                raise
            raise converted from error
        self._graphs[key] = graph
        self.captures += 1
        LOG.info("cuda_graph %s: captured input %s (capture %d of this step), holding %.1f MiB", self.name, key,
                 self.captures, graph.nbytes / MiB)
        if self.captures > self.warn_after and not self._warned:
            self._warned = True
            message = (f"autotune: cuda_graph({self.name}) has captured {self.captures} input shapes, holding "
                       f"{self.graph_bytes / MiB:.1f} MiB: every new batch or image size captures (and tunes) "
                       f"again. Keep the shapes fixed (drop or pad the last short batch), or pass patience=N to run "
                       f"new shapes eagerly after N graphs.")
            LOG.warning(message)
            warnings.warn(message, RetuningWarning, stacklevel=3)
        return outputs

    def _simulated_capture(self, graph: Graph):
        """The simulator's stand-in: the step on the static inputs, under the capture's checks."""
        with _capture_of(self.name), _cuda().holding() as kept:
            graph.outputs = self.step(*graph.args, **graph.kwargs)
        graph.kept = kept
        return graph.outputs

    def _gpu_capture(self, graph: Graph):
        import cupy
        caller = cupy.cuda.get_current_stream()
        graph.stream, graph.pool = cupy.cuda.Stream(non_blocking=True), cupy.cuda.MemoryPool()
        graph.stream.wait_event(caller.record())                # the static inputs are written
        private = cupy.cuda.using_allocator(graph.pool.malloc)
        with private, graph.stream, _capture_of(self.name), _cuda().holding() as kept:
            graph.stream.begin_capture()
            try:
                graph.outputs = self.step(*graph.args, **graph.kwargs)
            except BaseException:
                with contextlib.suppress(Exception):          # end the failed capture; its own error is the news
                    graph.stream.end_capture()
                raise
            captured = graph.stream.end_capture()             # an invalidated capture raises here
        graph.graph, graph.kept = captured, kept
        self._launch(graph, caller)
        return graph.outputs

    def _replay(self, graph: Graph, args, kwargs):
        if graph.graph is None:                               # the simulator: eager, on the static buffers
            graph.copy_in(args, kwargs)
            with _capture_of(self.name):
                graph.outputs = self.step(*graph.args, **graph.kwargs)
            return graph.outputs
        import cupy
        caller = cupy.cuda.get_current_stream()
        graph.stream.wait_event(caller.record())
        with graph.stream:
            _cuda().record("cupy.copy", graph.copy_in(args, kwargs))
        self._launch(graph, caller)
        return graph.outputs

    @staticmethod
    def _launch(graph: Graph, caller) -> None:
        """Launch the graph on its stream; the caller's stream waits for it."""
        _cuda().record("cuda.graph_launch")
        graph.graph.launch(graph.stream)
        caller.wait_event(graph.stream.record())

    def __repr__(self) -> str:
        return (f"<cuda_graph {self.name}: {self.captures} captured, {self.replays} replays, "
                f"{self.eager_calls} eager calls, {self.graph_bytes / MiB:.1f} MiB>")


@functools.lru_cache(maxsize=1)
def _cuda():
    """``convalgos.cuda``, imported at the first capture (``import autotune`` does not load the GPU side)."""
    import convalgos.cuda
    return convalgos.cuda


def _simulated(args, kwargs) -> bool:
    """True when the step's arrays are not CuPy's (the simulator's NumPy stand-ins)."""
    arrays = [a for a in list(args) + list(kwargs.values()) if hasattr(a, "shape")]
    return simulator_enabled() or not any(map(is_cupy_array, arrays))


def cuda_graph(step=None, *, tuners=(), patience=None, warn_after=8):
    """``step`` replayed as a CUDA graph per input shape (module docstring); usable as ``@cuda_graph`` too.
    ``tuners``: the Tuners its convs go through, put in graph mode (``autotune.cuda_graph`` passes the
    module-level one, and the simulated GPU's under the simulator)."""
    if step is None:
        return lambda fn: CudaGraph(fn, tuners=tuners, patience=patience, warn_after=warn_after)
    return CudaGraph(step, tuners=tuners, patience=patience, warn_after=warn_after)
