"""Which time a run costs the step, and which time made the choice.

On the CPU a run costs its wall time. On the GPU it costs the larger of the host time to issue its launches
and the GPU time of its kernels, or the GPU time alone in graph mode (``clock.Sampler``); cuDNN's benchmark
mode times GPU time only, which chose the slower step on a host-bound ResNet-20 (0.89x the heuristic's on an
H200). ``decided`` says which of the two made the choice, and what GPU time alone would have chosen.
"""
from __future__ import annotations

from ..measure import median


def split_medians(race) -> tuple[dict, dict]:
    """(name -> median host seconds per call, name -> median GPU seconds), where measured apart."""
    host = {n: median([s.host for s in r.values()]) for n, r in race.rounds.items()
            if r and next(iter(r.values())).host is not None}
    gpu = {n: median([s.gpu for s in r.values()]) for n, r in race.rounds.items() if n in host}
    return host, gpu


def decided(race, choice: str) -> str:
    """Which time made ``choice``: GPU time in graph mode; else host or GPU time, whichever was the larger for
    it, and the candidate that GPU time alone would have chosen where that differs ("" on the CPU)."""
    host, gpu = split_medians(race)
    if choice not in gpu:
        return ""
    if race.sampler.graph_mode:
        return "GPU time (graph mode: the step replays as a CUDA graph, its host cost paid once at capture)"
    by_gpu = min(gpu, key=gpu.get)
    which = "host time" if host[choice] > gpu[choice] else "GPU time"
    why = (f"{which} (eager: a call costs the larger of host {host[choice] * 1e3:.3f} ms and GPU "
           f"{gpu[choice] * 1e3:.3f} ms)")
    if by_gpu != choice:
        why += (f"; by GPU time alone {by_gpu} would have won ({gpu[by_gpu] * 1e3:.3f} ms on the GPU, "
                f"{host[by_gpu] * 1e3:.3f} ms on the host)")
    return why
