"""The race of one key's candidates: interleaved rounds of samples (``clock.py``), a sample that waited for a
CPU retaken, slow candidates leaving early, until the leaders are known; ``judge.py`` then decides between the
top two on paired ratios.

Round 0 is the candidates' checked calls (``tuning.py``), each a sample where it compiled nothing and took no
page fault (``tuning.first_touch_free``; its waits judged as any sample's), else a warm-up only. A short call's
checked call (under ``pair_below``), a single call after another candidate's, screens only (``screening``): it
may end the candidate's race, 2x slower than the fastest checked call (``leaving.py``), but its median, settling
and pairs are of race samples. Then a round takes one sample of each candidate still racing, round 1 in ranked
order, each later one in a fresh (seeded) order (``measure.rotate`` says why) started by the candidate whose call
ran last. A short call is timed right after a call of its own (``clock.py``: as in a step, not after another
candidate's, which cost it up to ~1.5x): an untimed one, or for a round's first, its previous sample; so the
judge's pair rounds alternate AB, BA, three calls each, not four. Most candidates leave after round 0 (screened
or abandoned: one call) or round 1 (settled: two or three calls).

A sample whose threads waited for a CPU more than ``wait_share`` of its time (another process had the core) is
not evidence of the algorithm's speed: it is set aside and retaken at the end of the round, at most ``retakes``
times, so a neighbour that comes and goes in bursts of tens of milliseconds is waited out (the retakes first
wait, up to ``retake_wait``, for a moment when no other process is runnable). A neighbour that stays makes
every retake wait too: the last one is kept, marked, and the choice made on such samples is provisional
(``provisional.py``, which also says when the race could not be cleaned); a candidate whose retakes came back
waiting in two rounds in a row is retaken no more (they would only triple its cost) and is judged on its runs,
waits and all. Its waits may be its own (a BLAS pool beside Numba's: three threads for two cores): a sample
that waited with no other process runnable as it started or ended is not retaken, and two such make the
candidate judged so (``_count_own_wait``).

After each round the candidates that have their answer leave the race (``leaving.py``: abandoned, settled or
done). A candidate that stopped early behind a leader that then slowed down may end up leading on one or two
runs: it and the runner-up run more rounds until it has ``min_runs`` clean ones.

"Clean": neither a spike (over ``spike_ratio`` times the candidate's fastest run, its warm-up included: a
page fault, an interrupt, what the readings do not see; where most of its runs would be spikes, the machine
slowed, they are its level, and a spike is a run over ``spike_ratio`` times their median:
``measure.without_spikes``) nor a run that waited. Measured (2026-12-06, Zen 3, the regret bench's 12 layers,
8 interleaved pairs of warm tunings): the level rule costs 0.96x the old one's tuning time.
A candidate no longer retaken is judged on its kept runs, waits and all: what it costs under the conditions
measured.

Every round is kept by number, so two candidates' samples of one round, taken a few milliseconds apart under
the same conditions, form a pair: ``pairs(a, b)`` is what the judge's ratios are made of, and ``extend([a, b])``
runs more rounds of those two alone.

What a run costs the step, on the CPU and on the GPU: ``host_or_gpu.py``.
"""
from __future__ import annotations

import random
import time

from ..measure import median, without_spikes
from .leaving import still_active
from .provisional import neighbour_share_seen


class Race:
    """Rounds over the candidates that passed the check. ``settings``: the Tuner (its race settings);
    ``calls``: name -> the call; ``warmup``: name -> seconds of its warm-up run; ``sampler``: a
    ``clock.Sampler``."""

    def __init__(self, settings, calls: dict, warmup: dict, sampler, device, registry: dict, first=None):
        self.s, self.calls, self.warmup, self.sampler = settings, calls, warmup, sampler
        self.device, self.registry = device, registry
        self.rounds = {name: {} for name in calls}       # name -> round number -> the Sample kept
        self.retaken = {name: [] for name in calls}      # name -> the samples set aside for waiting
        self.abandoned, self.failed, self.spent, self.done, self.stuck, self.own_waits = {}, {}, 0.0, 1, {}, {}
        self.calls_by = {name: 0 for name in calls}      # name -> calls made in the race (untimed ones included)
        self.spent_by = {name: 0.0 for name in calls}    # name -> their seconds (an untimed call: as the timed)
        for name, sample in (first or {}).items():       # round 0: the checked calls that are evidence
            self.rounds[name][0] = sample
            self._count_own_wait(name, sample)
        self.block_costs = {}                            # name -> mean cost per call in blocks (``blocks.py``)
        self.block_evidence = {}                         # name -> [blocks, the mean's standard error]
        self.order_rng = random.Random(0)
        self.last = None                                 # the candidate whose call ran last (``_lead``)

    # ---- what has been measured -----------------------------------------------------------------------
    @property
    def samples(self) -> dict:
        """name -> seconds of its kept runs, in order (the candidates still in the race: not failed)."""
        return {n: [s.seconds for s in r.values()] for n, r in self.rounds.items()}

    def waited(self, sample) -> bool:
        return sample.wait_share() > self.s.wait_share

    def floor(self, sample) -> float | None:
        """A lower bound of the call's time with nothing disturbing it: its time less every thread's wait for a
        CPU (a wait delays the call by at most its length), where it took no page fault; None where the reader
        counts no waits or no faults (the bound would not hold)."""
        reader = self.sampler.reader
        if not (reader.sees_wait and reader.sees_faults) or sample.usage.faults:
            return None
        return sample.seconds - sample.usage.waited

    def screening(self, name: str) -> bool:
        """Whether ``name``'s round 0 (its checked call) screens only (``leaving.py``), not one of the runs its
        median and pairs are made of: a short call's (under ``pair_below``), whose race samples follow a call of
        its own, as in a step, while its checked call followed another candidate's call and the check's work.
        Measured (2026-12-05, the 1x1 stride-2 layer, 40 interleaved rounds): a call right after another
        algorithm's took 1.06-1.22x one after its own, enough to settle a candidate within 10% of the leader."""
        return 0 in self.rounds[name] and self.warmup[name] < self.s.pair_below

    def step_rounds(self, name: str) -> dict:
        """round -> Sample of ``name``'s kept runs taken as a step pays for a call (all but a screening round 0)."""
        screened = self.screening(name)
        return {r: s for r, s in self.rounds[name].items() if r or not screened}

    def clean_rounds(self, name: str) -> dict:
        """round -> seconds of ``name``'s step runs (``step_rounds``) that neither waited nor were spikes."""
        quiet = {r: s.seconds for r, s in self.step_rounds(name).items() if not self.waited(s)}
        keep = without_spikes(list(quiet.values()), self.s.spike_ratio, self.warmup[name])
        low = max(keep, default=-1.0)
        return {r: t for r, t in quiet.items() if t <= low}

    def _evidence_rounds(self, name: str) -> dict:
        """round -> seconds of the runs that speak for ``name``: its clean ones, or, once its retakes are stuck
        (its waits are its own threads'), every kept run."""
        if self.stuck.get(name, 0) < 2:
            return self.clean_rounds(name)
        return {r: s.seconds for r, s in self.step_rounds(name).items()}

    def waits_are_own(self, name: str) -> bool:
        """Whether two of ``name``'s runs waited with no other process runnable (``_count_own_wait``): its waits
        are its own threads'."""
        return self.own_waits.get(name, 0) >= 2

    def waits_kept(self) -> dict:
        """name -> why its runs are judged waits and all, not retaken, for the candidates so judged (the table)."""
        return {n: "its own threads' waits" if self.waits_are_own(n) else
                "its retakes waited in two rounds in a row"
                for n, k in self.stuck.items() if k >= 2 and n in self.rounds}

    def clean(self, name: str) -> list:
        """The seconds of ``name``'s kept runs that neither waited nor were spikes."""
        return list(self.clean_rounds(name).values())

    def kept_steps(self, name: str) -> list:
        """The seconds of its clean step runs, else (every run waited or spiked: a neighbour that stayed) of all
        its step runs."""
        return self.clean(name) or [s.seconds for s in self.step_rounds(name).values()]

    def kept(self, name: str) -> list:
        """The seconds its median is taken over: ``kept_steps``, or before it has any, its screening run."""
        return self.kept_steps(name) or self.samples[name]

    def typical(self, name: str) -> float:
        return median(self.kept(name))

    def mean_cost(self, name: str) -> float:
        """The mean of every run of ``name`` taken, retaken ones included: what a call costs on average under
        the conditions measured, waits and all (each run is an independent draw of them)."""
        every = [s.seconds for s in self.rounds[name].values()] + [s.seconds for s in self.retaken[name]]
        return sum(every) / len(every)

    def leader(self) -> str:
        return min((n for n, r in self.rounds.items() if r), key=self.typical)

    def spikes(self) -> dict:
        """name -> how many of its kept runs that did not wait were spikes."""
        out = {}
        for name, rounds in self.rounds.items():
            quiet = [s.seconds for s in rounds.values() if not self.waited(s)]
            out[name] = len(quiet) - len(without_spikes(quiet, self.s.spike_ratio, self.warmup[name]))
        return out

    def wait_share(self, name: str) -> float:
        """Seconds its threads waited per second of its runs, over every run taken, retaken ones included."""
        every = list(self.rounds[name].values()) + self.retaken[name]
        total = sum(s.seconds for s in every)
        return sum(s.usage.waited for s in every) / total if total > 0 else 0.0

    def pairs(self, a: str, b: str) -> list:
        """(a's seconds, b's seconds) of the rounds in which both were timed and neither run waited (unless its
        candidate's retakes are stuck: its waits are its own) or was a spike: the paired evidence the judge
        decides on. Never pairs of runs that waited or were spikes: beside a neighbour that stays, blocks
        decide (``blocks.py``); beside one that comes and goes, such runs carry its bursts, not the algorithms
        (until 2026-12-06, under ``min_pairs`` clean pairs fell back on the rounds in which both waited or
        both did not, spikes included: on the 11x11 stride-4 layer beside bursts, 6 such pairs spread
        0.53-2.19, direct's 0.440 ms spike over direct_channels' 0.201 among them, and their median, 0.955,
        kept ``direct`` over ``direct_channels``, whose clean runs' median was 0.70x its: 48% regret)."""
        ca, cb = self._evidence_rounds(a), self._evidence_rounds(b)
        return [(ca[r], cb[r]) for r in sorted(ca.keys() & cb.keys())]

    # ---- running it ---------------------------------------------------------------------------------------
    def run(self) -> None:
        """Rounds over every candidate until each has left the race (module docstring)."""
        active = list(self.calls)
        if any(self.rounds.values()):        # round 0, the checked calls that are evidence, screens first
            active = still_active(self, active)
        while active:
            self.round(active)
            active = still_active(self, active)
        for _ in range(3):      # a leader that stopped early, behind one that later slowed, gets min_runs clean runs
            if not self.rounds:
                return
            order = sorted(self.rounds, key=self.typical)
            short = self.s.min_runs - len(self.kept(order[0]))
            if short <= 0 or len(self.rounds[order[0]]) >= self.s.max_runs:
                return
            self.extend(order[:2], short)

    def extend(self, names: list, rounds: int = 1) -> None:
        """``rounds`` more rounds of ``names`` alone (the judge's shoot-out)."""
        for _ in range(rounds):
            self.round([n for n in names if n in self.rounds])

    def round(self, names: list) -> None:
        """One sample of each of ``names``; the ones that waited retaken at the end of the round, except a
        candidate whose retakes came back waiting in its last two rounds (``stuck``)."""
        names = list(names)
        if self.done > 1:
            self.order_rng.shuffle(names)
        if self.last in names:                  # it follows its own call: no untimed lead (two alternate AB, BA)
            names.insert(0, names.pop(names.index(self.last)))
        retaken, taken = {}, {}
        for attempt in range(self.s.retakes + 1):
            if attempt and names:
                self._await_quiet()
            again = []
            for name in names:
                sample = taken[name] = self._take(name)
                if sample is None:
                    continue
                self._count_own_wait(name, sample)
                if attempt < self.s.retakes and self._retake(name, sample, taken):
                    self.retaken[name].append(sample)
                    retaken[name] = True
                    again.append(name)
                else:
                    self.rounds[name][self.done] = sample
                    if attempt:
                        retaken[name] = self.waited(sample)         # True: every retake waited too
            names = again
        for name, waited_again in retaken.items():
            self.stuck[name] = self.stuck.get(name, 0) + 1 if waited_again else 0
        self.done += 1

    def _retake(self, name: str, sample, taken: dict) -> bool:
        """Whether a run is retaken: it waited, its candidate's retakes are not stuck, and it could still be the
        fastest once its waiting is taken off (waiting only adds time: a run whose time less all its threads'
        waiting is over ``settle_ratio`` times the best clean run so far is slow whatever the neighbour did)."""
        if not self.waited(sample) or self.stuck.get(name, 0) >= 2 or sample.alone():
            return False            # (no other process runnable as it started or ended: a retake would wait alike)
        clean = [t for n in self.rounds for t in self.clean(n)] + [s.seconds for s in taken.values()
                                                                  if s is not None and not self.waited(s)]
        return not clean or sample.seconds - sample.usage.waited <= self.s.settle_ratio * min(clean)

    def _await_quiet(self) -> None:
        """Before a round's retakes, where other processes came and went in this race (seen runnable before
        some samples, not before others), wait up to ``retake_wait`` seconds for a moment when none is runnable
        (the runnable count polled every 0.5 ms), so the retakes run in a gap between a bursty neighbour's
        bursts rather than in the burst that spoiled the runs. A neighbour seen before nearly every sample
        (``neighbour_share``) stays: it is not waited for."""
        seen = neighbour_share_seen(self)
        if seen is None or not 0 < seen < self.s.neighbour_share:
            return
        deadline = time.perf_counter() + self.s.retake_wait
        while self.sampler.reader.runnable_others() and time.perf_counter() < deadline:
            time.sleep(0.0005)

    def _count_own_wait(self, name: str, sample) -> None:
        """A sample that waited though no other process had a task runnable as it started or as it ended
        (``Sample.alone``) waited for its own threads (a BLAS pool beside Numba's on two cores: measured quiet
        here, ``im2col`` on the 1x1 stride-2 layer waited 62% of its time, retaken four times for nothing). It is
        not retaken, and after two such the candidate is judged on its runs, waits and all, as one whose retakes
        are stuck. Both ends are read: beside neighbours that come and go, a burst that began during a call was
        not runnable as it started (measured, 2026-12-05: ``winograd_fused_4x4``'s 2.5 ms runs waited 60-73%
        with none seen before them, were judged its own, and the race kept ``direct``, 2.1x slower quietly)."""
        if self.waited(sample) and sample.alone():
            self.own_waits[name] = self.own_waits.get(name, 0) + 1
            if self.waits_are_own(name):
                self.stuck[name] = max(self.stuck.get(name, 0), 2)

    def _lead(self, name: str) -> int:
        """Untimed calls before the timed one: one for a short call (round 0, the checked calls, had none), unless
        the call that ran last was its own (the previous sample: a round starts with it, ``round``)."""
        return 1 if self.warmup[name] < self.s.pair_below and name != self.last else 0

    def _take(self, name: str):
        lead = self._lead(name)
        try:
            sample = self.sampler.take(self.calls[name], lead)
        except Exception as e:  # noqa: BLE001 - a candidate failing mid-race is dropped, with its error
            self.failed[name] = f"failed while timed: {type(e).__name__}: {e}"
            self.device.release(self.registry[name])
            del self.rounds[name], self.retaken[name]
            self.last = None
            return None
        self.last = name
        self.spent += sample.seconds * (1 + lead)          # the untimed call costs about as much
        self.spent_by[name] += sample.seconds * (1 + lead)
        self.calls_by[name] += 1 + lead
        return sample
