"""Tuning one key: which algorithms may run it, and which is fastest (what ``cudnn.benchmark`` does, in the open).

1. Candidates: every algorithm of the device's registry whose ``supports(p, op)`` holds, minus the
   non-deterministic ones when ``deterministic``, minus those over ``workspace_limit``; ranked by the
   heuristic; ``benchmark_limit`` keeps the best ranked N; ``prune_ratio`` (2) drops those the heuristic's
   measurements never found within that many times the best on any layer of the layer's class near this one
   (``heuristics.NEAR_OCTAVES``), or, with none near, on any layer of the class (``closest`` in
   ``heuristics.json``; every candidate costs at least its checked call, so one 20x slower costs 20 runs of
   the winner; a seed's estimate prunes at 3x that, ``heuristics.ESTIMATE_MARGIN``). Every exclusion is recorded
   with its reason. When nothing fits the workspace limit, the error names the smallest workspace that would.
   First, the device's backend must run here (``convalgos.arrays.gpu_problem``): a GPU without CuPy, a driver
   or a working compiler is one ``GPUUnavailableError`` naming the fix, not every candidate failing with it.
   For a ``prepared`` key (eval mode: the caller prepares the weight once), a candidate that prepares has its
   weight prepared once first (seconds and bytes recorded apart, ``Entry.prepare_seconds``/``prepare_bytes``)
   and every run of it below, checked and timed, is the prepared path the caller will run.
   Every candidate writes into one output: the caller's ``out=``, or else one buffer allocated for the race.
   The call's own allocation costs the same whatever algorithm runs, so timing it only adds noise, and a
   large fresh output is not even the same cost twice: measured on the articles' layer (a 67 MB output), the
   first calls paid 25-125 ms in page faults against 11 ms once the kernel had memory at hand, which got
   whichever candidate ran first abandoned.
2. Each candidate runs once on the real operands, its checked call, and its result is checked against the
   float64 reference (``measure.ReferenceCheck``); one outside its tolerance is rejected, and one that raises
   anything at all is skipped with the error recorded. Numba's compiling or loading of its kernels in that
   first call (and its weight's preparation) is measured apart (``jit.py``, ``Entry.jit``); when there was
   any, the candidate warms up again (and prepares again) and the race and the table use that second call,
   so compilation is in no number the race compares (on a first run, 4-16 s of a first call). The checked
   call is timed as a race sample (the pool woken, the readings around it): where it compiled nothing and took
   no page fault (``first_touch_free``), it is the race's round 0, its waits judged as any sample's; else (a
   first call touching its workspace's fresh pages: up to 7x a later one, measured) a warm-up only. The shared
   output is poisoned with NaN before each candidate's checked run (``measure.poison``), so one that
   leaves an element unwritten cannot pass on the previous candidate's answer: it is rejected. Before it, the
   device drops what the previous candidate left cached (``before_candidate``: the GPU's memory pool).
3. The race (``race/rounds.py``): interleaved rounds, one sample of each candidate per round (a short call
   right after an untimed one of its own; most candidates leave after round 0 or 1), each sample
   taken as a step pays for a call (``race/clock.py``: the worker pool awake, the call timed, the threads'
   wait for a CPU read around it, ``race/contention.py``). A sample that waited for a CPU is retaken at the
   end of its round (``retakes`` times at most); a spike (over ``spike_ratio`` times the candidate's fastest,
   its warm-up included) is no evidence either. Clearly slower candidates leave early (``screen_ratio`` after
   round 0, ``abandon_ratio``, ``settle_ratio``); the others run until ``min_runs`` clean runs give their
   median to ``precision`` or the rounds have cost ``cost_cap`` times the best median (``time_budget`` seconds
   at most).
4. The judge (``race/judge.py``): when the runner-up's median is within ``reach`` of the leader's, a paired
   shoot-out of the two decides on the median of their per-round ratios and its distribution-free interval:
   decided (outside the tie band ``tie_tolerance``), a tie (inside it), or a close call (neither, after
   ``max_pairs`` pairs or ``shootout_cap`` times the leader's median of extra time).
5. The choice: the faster of a decided pair, else the race's leader; a tie goes to the deterministic one, then
   the smaller workspace, the smaller error, the name, so the choice is stable run to run. A choice made
   while another process shared the cores (seen runnable before nearly every sample, or most runs waited for a
   CPU) is marked provisional (``race/provisional.py``) and raced again once the machine
   is quiet (``race/quiet.py``, ``Tuner``).
"""
from __future__ import annotations

import numpy as np

from convalgos import UnsupportedError
from convalgos.backends import BACKENDS

from .heuristics import ESTIMATE_MARGIN
from .jit import jit_time
from .measure import ReferenceCheck, poison
from .race import Race, blocks, host_or_gpu, judge
from .race.clock import Sample, Sampler
from .race.provisional import neighbour_share_seen, provisional, stayed
from .table import Entry, Key, MiB


def candidates(tuner, key: Key, registry: dict, kind: str) -> tuple[list, dict, dict, str]:
    """(eligible names best-ranked first, workspace bytes per name, skip reasons, the ranking rule)."""
    p, op, limit = key.params, key.op, tuner.workspace_limit
    BACKENDS[kind].require()       # a GPU side that cannot run is one error here, not a failure per candidate
    skipped, workspace, names, over = {}, {}, [], {}
    for name, algorithm in registry.items():
        support = algorithm.supports(p, op)
        if not support:
            skipped[name] = support.reason
            continue
        workspace[name] = int(algorithm.workspace_bytes(p, op))
        if key.deterministic and not algorithm.deterministic:
            skipped[name] = "not deterministic (deterministic=True)"
        elif limit is not None and workspace[name] > limit:
            skipped[name] = f"needs {workspace[name] / MiB:.1f} MiB workspace, limit {limit / MiB:.1f} MiB"
            over[name] = workspace[name]
        else:
            names.append(name)
    if not names:
        message = f"no algorithm can run {key}"
        if over:
            smallest = min(over, key=over.get)
            message += (f" within workspace_limit={limit} bytes; the smallest workspace that would have worked is "
                        f"{over[smallest]} bytes ({over[smallest] / MiB:.2f} MiB, {smallest})")
        raise UnsupportedError(f"{message}. Reasons: {skipped}")
    flops = {name: registry[name].flops(p, op) for name in names}
    ranked, rule = tuner.heuristics.rank(p, names, op=op, device=kind, flops=flops, prepared=key.prepared,
                                         workspace=workspace)
    return ranked, workspace, skipped, rule


def heuristic_entry(tuner, key: Key, registry: dict, kind: str, source: str = "heuristic", why: str = "") -> Entry:
    """The entry of benchmark-off mode: the heuristic's first choice, the rest as fallbacks; nothing timed."""
    ranked, workspace, skipped, rule = candidates(tuner, key, registry, kind)
    return Entry(key, ranked[0], source, rule=why + rule, workspace=workspace, skipped=skipped, ranked=ranked)


def reused_entry(tuner, key: Key, registry: dict, kind: str, nearest: Entry | None, why: str) -> Entry:
    """A new shape's entry that reuses the choice of ``nearest`` (a tuned shape of the same layer and pass),
    or the heuristic's when there is none or its choices cannot run this shape (source "patience")."""
    ranked, workspace, skipped, rule = candidates(tuner, key, registry, kind)
    reusable = [n for n in (nearest.ranked if nearest else []) if n in ranked]
    if not reusable:
        return heuristic_entry(tuner, key, registry, kind, "patience", f"{why}; no tuned shape to reuse: ")
    return Entry(key, reusable[0], "patience", rule=f"{why}; reuses the choice for {nearest.key.params}",
                 workspace=workspace, skipped=skipped, ranked=reusable + [n for n in ranked if n not in reusable])


@np.errstate(invalid="ignore", over="ignore")     # NaN/Inf operands: NumPy's warnings would name the candidates'
def tune(tuner, key: Key, a, b, device, registry: dict, out, timer) -> Entry:
    """Measure the candidates on the real operands and choose (steps 1-5 of the module docstring)."""
    start = timer.now()
    ranked, workspace, skipped, rule = candidates(tuner, key, registry, device.kind)
    ranked = _limit_and_prune(tuner, ranked, rule, key, skipped, device.kind)
    entry = Entry(key, "", "benchmark", rule=rule, workspace=workspace, skipped=skipped, fresh_output=out is None)
    p, op = key.params, key.op
    checker = ReferenceCheck(op, device.host(a), device.host(b), p)
    if out is None:
        out = device.xp.empty(p.result_shape(op), a.dtype)                # the race's output (step 1)
    with jit_time(timer.now) as jit:       # the pool's wake-up kernel: loaded once per process, not any run's time
        device.wake()
    if jit.seconds:
        entry.jit["(pool wake-up)"] = jit.seconds
    reader = tuner.reader
    reader.refresh()                       # the threads that exist now (the pool starts at its first use)
    sampler = Sampler(timer, reader, device.wake, tuner.graph_mode)
    calls, first = {}, {}                  # first: name -> its checked call, where that is evidence (step 2)
    for name in ranked:
        algorithm, form = registry[name], []

        def call(algorithm=algorithm, form=form):
            return device.run(algorithm, op, a, b, p, out, prepared=form[0] if form else None)

        result = []
        try:
            device.before_candidate()
            with jit_time(timer.now) as jit:
                if key.prepared and algorithm.prepares(op):
                    entry.prepare_seconds[name] = timer.time(lambda: form.append(algorithm.prepare(b, p, op)))
                    entry.prepare_bytes[name] = form[0].nbytes
                poison(out)
                checked = _checked_call(sampler, lambda: result.append(call()))
            if device.last_workspace is not None:
                workspace[name] = device.last_workspace
            if jit.seconds:                              # compiled or loaded: warm up again, compiled (step 2)
                entry.jit[name] = jit.seconds
                with jit_time(timer.now) as jit:
                    if name in entry.prepare_seconds:
                        entry.prepare_seconds[name] = timer.time(lambda: algorithm.prepare(b, p, op))
                    checked = _checked_call(sampler, call)
            entry.warmup[name] = checked.seconds
        except Exception as e:  # noqa: BLE001 - whatever a candidate raises skips it, never the user's call
            skipped[name] = f"failed: {type(e).__name__}: {e}"
            device.release(algorithm)
            continue
        host = device.host(result[0])
        verdict = checker.judge(host)
        entry.errors[name] = verdict.error
        if verdict.nonfinite:
            entry.nonfinite[name] = verdict.nonfinite
        tolerance, unwritten = algorithm.tolerance_of(op, p.dtype), checker.unwritten(host)
        if verdict.nonfinite.startswith("wrong"):
            skipped[name] = f"rejected: NaN/Inf {verdict.nonfinite}"
        elif not entry.errors[name] <= tolerance:
            skipped[name] = (f"rejected: normwise error {entry.errors[name]:.1e} exceeds its {p.dtype} "
                             f"tolerance {tolerance:.0e}")
        elif unwritten:
            skipped[name] = (f"rejected: {unwritten} of {host.size} output elements NaN from finite operands "
                             f"(left unwritten: the output was NaN-poisoned before the run)")
        else:
            calls[name] = call
            if not jit.seconds and first_touch_free(checked, sampler):
                first[name] = checked
    reader.refresh()          # threads the candidates started (a BLAS pool at its first product): read in the race
    race = Race(tuner, calls, entry.warmup, sampler, device, registry, first)
    race.run()
    skipped.update(race.failed)
    if not race.rounds:
        raise RuntimeError(no_candidate_left(key, skipped, ranked))

    def preference(n):
        return not registry[n].deterministic, workspace.get(n, 0), entry.errors.get(n, 0.0), n

    entry.mean_times = stayed(race)
    if entry.mean_times:      # a neighbour was there most of the time: what is fastest under it, by blocks
        (entry.algo, entry.tied), verdict = blocks.choose(race, preference, tuner), None
    else:
        entry.algo, entry.tied, verdict = judge.choose(race, preference, tuner)
    entry.times = {n: race.block_costs.get(n, race.mean_cost(n)) if entry.mean_times else race.typical(n)
                   for n in race.rounds}
    entry.blocks = race.block_evidence
    entry.runs = {n: len(r) for n, r in race.rounds.items()}
    entry.samples = dict(race.samples)
    entry.spikes = {n: k for n, k in race.spikes().items() if k}
    entry.retaken = {n: len(r) for n, r in race.retaken.items() if r}
    entry.calls = {n: 1 + (n in entry.jit) + race.calls_by.get(n, 0) for n in entry.warmup}  # checked, warmed again
    entry.spent = {n: entry.warmup[n] + race.spent_by.get(n, 0.0) for n in entry.warmup}
    entry.waited = {n: round(race.wait_share(n), 4) for n in race.rounds}
    entry.verdict = verdict.to_dict() if verdict else {}
    entry.abandoned = race.abandoned
    entry.ranked = [entry.algo] + sorted((n for n in entry.times if n != entry.algo), key=entry.times.get)
    entry.host_times, entry.gpu_times = host_or_gpu.split_medians(race)
    entry.decided = host_or_gpu.decided(race, entry.algo)
    entry.provisional = provisional(race, reader.sees_wait, tuner.contention_ratio)
    entry.neighbours = neighbour_share_seen(race)
    entry.waits_kept = race.waits_kept()
    entry.tuning_seconds = timer.now() - start
    return entry


def _checked_call(sampler, fn):
    """The checked call of a candidate, as a race sample (the pool woken, the readings around it); on a device
    whose timer splits host and GPU time, its wall time alone (``Sample`` with no readings)."""
    return Sample(sampler.timer.time(fn)) if sampler.split else sampler.take(fn)


def first_touch_free(sample, sampler) -> bool:
    """Whether a candidate's checked call is evidence of its speed, a race sample like any other (round 0): it
    compiled nothing (the caller knows) and took no page fault (it touched no fresh memory: no workspace's first
    pages), on a reader that counts faults and a timer that times the host. Its waits for a CPU are judged as
    any sample's (``race/rounds.py``). Measured here (2026-12-05, AMD EPYC, the regret bench's 12 layers): every
    candidate's first call in a second tuning took 0 faults and 0.5-1.6x its median in the race; in a
    process's first tuning most took 3-2678 faults and up to 7x (they stay warm-ups)."""
    return sampler.reader.sees_faults and not sampler.split and sample.usage.faults == 0


def no_candidate_left(key: Key, skipped: dict, ranked: list, width: int = 90) -> str:
    """Why no candidate that was tried is left, in a few short lines: each tried candidate's reason (cut at
    ``width`` characters), and a count of the others (not eligible, pruned or over a limit)."""
    lines = [f"every candidate for {key} was rejected or failed:"]
    for name in ranked:
        why = skipped.get(name, "")
        lines.append(f"  {name}: {why if len(why) <= width else why[:width - 3] + '...'}")
    others = len(skipped) - len(ranked)
    if others:
        lines.append(f"  ({others} other algorithm(s) not tried: unsupported, pruned or over a limit)")
    return "\n".join(lines)


def _limit_and_prune(tuner, ranked: list, rule: str, key: Key, skipped: dict, kind: str) -> list:
    limit = tuner.benchmark_limit
    if limit is not None:
        for rank, name in enumerate(ranked[limit:], limit + 1):
            skipped[name] = f"benchmark_limit={limit}: ranked {rank} by rule {rule!r}"
        ranked = ranked[:limit]
    if tuner.prune_ratio is not None:
        slowdowns = tuner.heuristics.slowdowns(rule, ranked, op=key.op, device=kind, prepared=key.prepared,
                                               p=key.params)
        estimated = tuner.heuristics.estimated(rule)
        near = tuner.heuristics.near_layers(rule, key.params, op=key.op, device=kind, prepared=key.prepared)
        where = (f"on the {len(near)} layer(s) of its class near this one" if near else "on every layer of its class")
        for name, slowdown in slowdowns.items():
            if estimated and slowdown >= ESTIMATE_MARGIN * tuner.prune_ratio:
                skipped[name] = (f"pruned: the seed's estimate puts it {slowdown:.1f}x behind the best (prune_ratio="
                                 f"{tuner.prune_ratio} x {ESTIMATE_MARGIN:g} for an estimate)")
            elif not estimated and slowdown >= tuner.prune_ratio:
                skipped[name] = (f"pruned: rule {rule!r} measured it at least {slowdown:.1f}x slower than the best "
                                 f"{where} (prune_ratio={tuner.prune_ratio})")
    return [n for n in ranked if n not in skipped]
