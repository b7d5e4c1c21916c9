"""``autotune.cuda_graph``'s logic on NumPy arrays (where the step runs eagerly, as in the simulator) with fake
algorithms and a fake clock: capture on the second call per shape, replays, a new shape captured anew and
logged, patience, the refusals and the memory report; the GPU path's order of operations on a stand-in CuPy
(side stream, private pool, capture, launch, the caller's stream waiting); and the race choosing by host or GPU
time."""
import logging

import numpy as np
import pytest

import autotune
from autotune import CaptureError
from autotune.devices import to_host
from autotune.graph import capturing, cuda_graph
from autotune.measure import Timer
from autotune.shapes import RetuningWarning
from autotune_fakes import FakeClock, arrays, fakes, tuner


def graphed(step_of, **options):
    """(the graphed step, its tuner): ``step_of(tuner)`` makes the step."""
    clock = FakeClock()
    t = tuner(clock, fakes(clock, a=1e-3, b=2e-3))
    return cuda_graph(step_of(t), tuners=[t], **options), t


def conv_step(t, seen=None):
    def step(x, w):
        if seen is not None:
            seen.append(capturing())
        return t.conv2d(x, w, padding=1)
    return step


def test_the_first_call_runs_eagerly_the_second_captures_then_it_replays():
    seen = []
    step, t = graphed(lambda t: conv_step(t, seen))
    x, w = arrays()
    assert t.graph_mode
    eager = step(x, w)
    assert (step.captures, step.eager_calls, t.cache_info().misses) == (0, 1, 1) and seen == [None]
    captured = step(x, w)
    assert step.captures == 1 and seen[1] and np.array_equal(captured, eager)
    replayed = step(x + 1, w)                       # the inputs copied into the static buffers
    assert step.replays == 1 and step.captures == 1 and t.cache_info().misses == 1
    assert np.array_equal(replayed, t.conv2d(x + 1, w, padding=1))


def test_a_new_shape_captures_anew_and_is_logged_and_warned(caplog):
    step, t = graphed(conv_step, warn_after=1)
    x, w = arrays()
    x3 = np.concatenate([x, x[:1]])
    with caplog.at_level(logging.INFO, logger="autotune"):
        step(x, w), step(x, w)
        step(x3, w)                                  # eager: this shape's first call tunes it
        with pytest.warns(RetuningWarning, match="captured 2 input shapes"):
            step(x3, w)
    assert step.captures == 2 and sum("cuda_graph" in r.message and "captured input" in r.message
                                      for r in caplog.records) == 2


def test_patience_runs_new_shapes_eagerly_after_n_graphs():
    step, t = graphed(conv_step, patience=1)
    x, w = arrays()
    x3 = np.concatenate([x, x[:1]])
    for _ in range(2):
        step(x, w), step(x3, w)
    step(x3, w)
    assert (step.captures, step.eager_calls, step.replays) == (1, 4, 0)     # x: eager, captured; x3: eager x3
    (why,) = step.refused.values()
    assert why.startswith("patience=1")


def test_a_tuner_miss_inside_the_capture_is_refused_then_the_shape_runs_eagerly():
    clock = FakeClock()
    t = tuner(clock, fakes(clock, a=1e-3, b=2e-3))
    calls = []

    def step(x, w):                                 # a data-dependent branch: another layer on the 2nd call
        calls.append(1)
        return t.conv2d(x, w if len(calls) != 2 else w[:, :, :2, :2], padding=1)

    graph_step = cuda_graph(step, tuners=[t])
    x, w = arrays()
    graph_step(x, w)
    with pytest.raises(CaptureError, match="tuner miss .*forward.*Tune on the eager call"):
        graph_step(x, w)
    assert graph_step.captures == 0 and len(graph_step.refused) == 1
    graph_step(x, w)                                # runs eagerly from then on
    assert graph_step.eager_calls == 2 and capturing() is None


def test_a_host_synchronisation_is_refused():
    def step_of(t):
        def step(x, w):
            y = t.conv2d(x, w, padding=1)
            to_host(y)                              # the library's to-host copy, as float(loss) would be
            return y
        return step
    step, _ = graphed(step_of)
    x, w = arrays()
    step(x, w)
    with pytest.raises(CaptureError, match="host synchronisation .*copied to the host"):
        step(x, w)


class CUDARuntimeError(RuntimeError):
    """Stands for CuPy's error when a capturing stream is synchronised."""


def test_cudas_own_capture_errors_become_a_capture_error():
    def step_of(t):
        def step(x):
            if capturing():
                raise CUDARuntimeError("cudaErrorStreamCaptureUnsupported: operation not permitted when stream "
                                       "is capturing")
            return x
        return step
    step, _ = graphed(step_of)
    x, _ = arrays()
    step(x)
    with pytest.raises(CaptureError, match="CUDA refused an operation while capturing .*StreamCaptureUnsupported"):
        step(x)


def test_the_memory_a_graph_holds_is_reported():
    def step_of(t):
        def step(x, w):
            t.algorithms["a"].workspace.get("graph test", (16, 16), np.float32)    # a kept buffer it writes
            return t.conv2d(x, w, padding=1)
        return step
    step, t = graphed(step_of)
    x, w = arrays()
    step(x, w), step(x, w)
    assert step.graph_bytes == x.nbytes + w.nbytes + 16 * 16 * 4
    assert "1 captured" in repr(step)


def test_autotune_cuda_graph_puts_the_default_tuner_in_graph_mode():
    before = autotune.default_tuner().graph_mode
    try:
        step = autotune.cuda_graph(lambda x: x)
        assert autotune.default_tuner().graph_mode and step.tuners[0] is autotune.default_tuner()
    finally:
        autotune.default_tuner().graph_mode = before


# ---- the race: host time beside GPU time ----------------------------------------------------------------------
class SplitTimer(Timer):
    """A GPU-like timer on the fake clock: the GPU time is the fake's cost, the host time its declared
    ``host`` seconds (which fake ran is told by its call count)."""

    def __init__(self, clock, algos, host):
        super().__init__(clock)
        self.algos, self.host = algos, host

    def time_both(self, fn):
        before = {n: a.calls for n, a in self.algos.items()}
        gpu = self.time(fn)
        ran = next(n for n, a in self.algos.items() if a.calls > before[n])
        return self.host[ran], gpu


def split_entry(graph_mode):
    clock = FakeClock()
    algos = fakes(clock, few_big_kernels=1e-3, many_launches=0.4e-3)     # GPU time
    host = {"few_big_kernels": 0.2e-3, "many_launches": 2e-3}           # host time to issue a call
    t = tuner(clock, algos, graph_mode=graph_mode)
    t.timer = SplitTimer(clock, algos, host)
    t.conv2d(*arrays())
    (entry,) = t.dispatch_table()
    return entry, str(t.dispatch_table())


def test_eager_the_race_minimises_the_larger_of_host_and_gpu_time():
    entry, table = split_entry(graph_mode=False)
    assert entry.algo == "few_big_kernels"
    assert entry.gpu_times["many_launches"] == pytest.approx(0.4e-3) and entry.host_times["many_launches"] == 2e-3
    assert entry.times["many_launches"] == pytest.approx(2e-3)
    assert entry.decided.startswith("GPU time (eager")
    assert "by GPU time alone many_launches would have won" in entry.decided
    assert "host ms" in table and "GPU ms" in table and "decided by GPU time (eager" in table


def test_in_graph_mode_the_race_minimises_gpu_time():
    entry, table = split_entry(graph_mode=True)
    assert entry.algo == "many_launches" and entry.times["many_launches"] == pytest.approx(0.4e-3)
    assert entry.decided.startswith("GPU time (graph mode")


def test_an_entry_with_host_and_gpu_times_survives_the_cache_file(tmp_path):
    entry, _ = split_entry(graph_mode=False)
    again = type(entry).from_dict(entry.to_dict())
    assert again.host_times == entry.host_times and again.decided == entry.decided


# ---- the GPU path's orchestration, on a stand-in CuPy (no GPU here) -----------------------------------------
class DeviceArray(np.ndarray):
    """Stands for a CuPy array (its type's module says cupy)."""


DeviceArray.__module__ = "cupy._core.core"


class StandInCupy:
    """Records what graph.py asks of CuPy: streams, captures, graph launches, the allocator in use."""

    def __init__(self):
        self.log, self.allocator = [], None
        self.cuda = self
        self.caller = self.Stream(self, "caller")

    def get_current_stream(self):
        return self.caller

    def MemoryPool(self):
        return type("Pool", (), {"malloc": "private malloc", "total_bytes": lambda pool: 4096})()

    def using_allocator(self, allocator):
        cupy = self

        class Using:
            def __enter__(self):
                cupy.allocator = allocator

            def __exit__(self, *exc):
                cupy.allocator = None
        return Using()

    class Stream:
        def __init__(self, cupy, name="side"):
            self.cupy, self.name = cupy, name

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def record(self):
            return f"event on {self.name}"

        def wait_event(self, event):
            self.cupy.log.append(f"{self.name} waits for {event}")

        def begin_capture(self):
            self.cupy.log.append(f"begin capture, allocator {self.cupy.allocator}")

        def end_capture(self):
            self.cupy.log.append("end capture")
            cupy = self.cupy
            return type("Graph", (), {"launch": lambda graph, stream: cupy.log.append(f"launch on {stream.name}")})()


@pytest.fixture
def stand_in_cupy(monkeypatch):
    cupy = StandInCupy()
    cupy.Stream = lambda non_blocking=False: StandInCupy.Stream(cupy)
    monkeypatch.setitem(__import__("sys").modules, "cupy", cupy)
    return cupy


def test_on_a_gpu_the_capture_uses_a_side_stream_and_a_private_pool_and_replays_launch_the_graph(stand_in_cupy):
    seen = []

    def step(x):
        seen.append(capturing())
        return x * 2
    graph_step = cuda_graph(step)
    x = np.arange(4.0).view(DeviceArray)
    graph_step(x)
    captured = graph_step(x)
    assert stand_in_cupy.log == ["side waits for event on caller", "begin capture, allocator private malloc",
                                 "end capture", "launch on side", "caller waits for event on side"]
    replayed = graph_step(x + 10)
    assert replayed is captured and stand_in_cupy.log[-2:] == ["launch on side", "caller waits for event on side"]
    static = graph_step._graphs[next(iter(graph_step._graphs))].args[0]
    assert np.array_equal(static, x + 10) and len(seen) == 2            # the replay ran no Python
    assert graph_step.graph_bytes == x.nbytes + 4096


def test_on_a_gpu_a_failed_capture_is_ended_and_its_cuda_error_named(stand_in_cupy):
    def step(x):
        if capturing():
            raise CUDARuntimeError("cudaErrorStreamCaptureInvalidated: operation failed due to a previous error "
                                   "during capture")
        return x
    graph_step = cuda_graph(step)
    x = np.arange(4.0).view(DeviceArray)
    graph_step(x)
    with pytest.raises(CaptureError, match="CUDA refused an operation while capturing"):
        graph_step(x)
    assert stand_in_cupy.log[-1] == "end capture" and stand_in_cupy.allocator is None and capturing() is None
