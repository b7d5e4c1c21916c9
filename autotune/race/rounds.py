"""The race of one key's candidates (steps 3 and 4 of ``tuning.py``): interleaved timed rounds (``measure.rotate``)
until each candidate's median is known well enough, or it is abandoned or can no longer tie the best; then a
re-timing of a leader, or of a runner-up, that rests on few clean runs.

What a run costs the step. On the CPU a run's wall time is its cost. On the GPU a call has two costs: the host
time it takes to issue its launches (Python, argument conversion, 17-80 us per Numba launch) and the GPU time
of its kernels; an eager step pays the larger of the two per call, since the host issues the next call while
the GPU runs this one, whereas a step replayed as a CUDA graph (``graph.py``) pays its GPU time only, the host
having issued it once at capture. cuDNN's benchmark mode times GPU time only, which chose the slower step on
a host-bound ResNet-20 (0.89x the heuristic's on an H200). So where the timer measures both (``time_both``:
the GPU's ``CudaEventTimer``), a run's cost is ``max(host, gpu)``, or ``gpu`` in the tuner's ``graph_mode``;
both are kept per candidate, and ``decided`` says which one made the choice."""
from __future__ import annotations

from ..measure import median, noise, rotate, without_spikes


class Race:
    """Interleaved timed rounds over the candidates that passed the check (steps 3 and 4). A candidate's
    typical time is the median of its runs that are not spikes (``measure.without_spikes``, the warm-up as
    a floor)."""

    def __init__(self, settings, calls: dict, warmup: dict, timer, device, registry: dict):
        self.s, self.calls, self.warmup, self.timer = settings, calls, warmup, timer
        self.device, self.registry = device, registry
        self.samples = {name: [] for name in calls}
        self.split = hasattr(timer, "time_both")          # host and GPU time apart (module docstring)
        self.graph_mode = getattr(settings, "graph_mode", False)
        self.host, self.gpu = {name: [] for name in calls}, {name: [] for name in calls}
        self.abandoned, self.failed, self.spent, self.retimed, self.retiming = {}, {}, 0.0, set(), None

    def run(self) -> None:
        self._rounds(list(self.calls))
        for _ in range(3):          # re-time a leader on few runs, and a runner-up dropped on few runs
            if not self.samples:
                return
            leader, runner = self.leader(), self._runner_up()
            if runner is None and len(self.clean(leader)) >= self.s.min_runs:
                return
            self.abandoned.pop(runner, None)
            self.retimed.add(runner)
            self.retiming = runner
            self._rounds([leader] + ([runner] if runner else []))

    def clean(self, name: str) -> list:
        """The timed runs of ``name`` that are not spikes."""
        return without_spikes(self.samples[name], self.s.spike_ratio, self.warmup[name])

    def clean_samples(self) -> dict:
        """name -> its runs that are not spikes (all its runs where every one was)."""
        return {name: self.clean(name) or self.samples[name] for name in self.samples}

    def typical(self, name: str) -> float:
        return median(self.clean(name) or self.samples[name])

    def leader(self) -> str:
        return min(self.samples, key=self.typical)

    def spikes(self) -> dict:
        """name -> how many of its timed runs were spikes."""
        return {name: len(runs) - len(self.clean(name)) for name, runs in self.samples.items()}

    def _evidence(self, name: str) -> int:
        """How many runs, the warm-up among them, are not spikes."""
        runs, warm = self.samples[name], self.warmup[name]
        low = min(runs + [warm])
        return sum(t <= self.s.spike_ratio * low for t in runs + [warm])

    def _time(self, name: str) -> None:
        try:
            if self.split:
                host, gpu = self.timer.time_both(self.calls[name])
                self.host[name].append(host)
                self.gpu[name].append(gpu)
                seconds = gpu if self.graph_mode else max(host, gpu)
            else:
                seconds = self.timer.time(self.calls[name])
        except Exception as e:  # noqa: BLE001 - a candidate failing mid-race is dropped, with its error
            self.failed[name] = f"failed while timed: {type(e).__name__}: {e}"
            self.device.release(self.registry[name])
            del self.samples[name]
            return
        self.samples[name].append(seconds)
        self.spent += seconds

    def split_medians(self) -> tuple[dict, dict]:
        """(name -> median host seconds per call, name -> median GPU seconds), of the candidates still racing."""
        return ({n: median(self.host[n]) for n in self.samples if self.host[n]},
                {n: median(self.gpu[n]) for n in self.samples if self.gpu[n]})

    def decided(self, choice: str) -> str:
        """Which time made ``choice``: GPU time in graph mode; else host or GPU time, whichever was the larger
        for it, and the candidate that GPU time alone would have chosen where that differs."""
        host, gpu = self.split_medians()
        if choice not in gpu:
            return ""
        if self.graph_mode:
            return "GPU time (graph mode: the step replays as a CUDA graph, its host cost paid once at capture)"
        by_gpu = min(gpu, key=gpu.get)
        which = "host time" if host[choice] > gpu[choice] else "GPU time"
        why = (f"{which} (eager: a call costs the larger of host {host[choice] * 1e3:.3f} ms and GPU "
               f"{gpu[choice] * 1e3:.3f} ms)")
        if by_gpu != choice:
            why += (f"; by GPU time alone {by_gpu} would have won ({gpu[by_gpu] * 1e3:.3f} ms on the GPU, "
                    f"{host[by_gpu] * 1e3:.3f} ms on the host)")
        return why

    def _rounds(self, active: list) -> None:
        rotate(active, self._time, self._still_active)

    def _still_active(self, active: list, done: int) -> list:
        """After a round: the candidates that run another (``_continues``)."""
        if not self.samples:
            return []
        leader = self.leader()
        best = self.typical(leader)
        over = self.spent >= min(self.s.time_budget, self.s.cost_cap * best)
        return [n for n in active if n in self.samples and self._continues(n, leader, best, over)]

    def _continues(self, name: str, leader: str, best: float, over: bool) -> bool:
        runs, evidence = self.samples[name], self._evidence(name)
        every = runs + [self.warmup[name]]
        fastest = min(every)
        if name == self.retiming and len(runs) < self.s.min_runs:
            return True                 # a runner-up re-timed gets min_runs timed runs before it is judged again
        if name != leader and best > 0:
            # two runs that are not spikes, or three runs of any kind, all that slow
            if (evidence >= 2 or len(every) >= 3) and fastest >= self.s.abandon_ratio * best:
                self.abandoned[name] = (f"all {len(every)} of its runs (warm-up included) took at least "
                                        f"{fastest / best:.1f}x the best median (abandon_ratio={self.s.abandon_ratio})")
                return False
            if evidence >= 2 and fastest > self.s.settle_ratio * best:
                return False            # it cannot tie the best: its median needs no more precision
        clean = self.clean(name)
        if len(runs) >= self.s.max_runs or (over and len(runs) >= 2 * self.s.min_runs):
            return False
        return len(clean) < self.s.min_runs or not (over or noise(clean) <= self.s.precision)

    def _runner_up(self):
        """The fastest candidate dropped on fewer than ``min_runs`` clean runs, when within reach of the leader."""
        if len(self.samples) < 2:
            return None
        leader = self.leader()
        early = [n for n in self.samples
                 if n != leader and len(self.clean(n)) < self.s.min_runs and n not in self.retimed]
        if not early:
            return None
        runner = min(early, key=lambda n: min(self.samples[n]))
        return runner if min(self.samples[runner]) < self.s.abandon_ratio * self.typical(leader) else None
