"""When a choice is provisional: made on runs that waited for a CPU, so right for a shared machine and perhaps
wrong once the machine is quiet again.

What is fastest beside a neighbour is not what is fastest on a quiet machine, and no correction recovers the
quiet order from contended runs. Measured beside one process spinning on one of two cores (2026-12-05, Intel
Xeon, blocks of 20 calls): quietly ``direct`` takes 0.20 ms and ``im2col`` 0.40; beside the neighbour 0.80
and 0.70, since ``direct``'s two workers wait at their barrier for the preempted one while BLAS copes
better; the threads' CPU time inflates too (0.16 -> 0.40 ms per thread for ``direct``), and wall time less
the longest run-queue wait still ranked them wrong (0.46 against 0.35). So the tuner keeps what was fastest
under the conditions measured, marks it provisional, and races the key again once the machine is quiet
(``quiet.py``, ``Tuner``): the mark is in the table and in ``save``d files, and a loaded provisional entry is
treated the same.

The rule: the choice is provisional when the runs it rests on waited, that is when the choice or the runner-up
(its rival in the judge's shoot-out) kept a run whose threads waited for a CPU more than ``wait_share`` of its
time after every retake (``rounds.py``), or when at least ``contended_share`` of all the race's runs waited
(retaken or kept): the neighbour was there most of the time, and a sub-millisecond run that came through
clean between two of its time slices is what the call costs in a quiet moment, not in a contended second. Where the platform cannot see waiting (``contention.RusageReader``,
``NullReader``), spikes stand in: at least ``contention_ratio`` of the timed runs were spikes.
"""
from __future__ import annotations


def provisional(race, choice: str, rival: str | None, sees_wait: bool, contention_ratio: float) -> str:
    """Why the choice is provisional ("" when it is not)."""
    names = [n for n in (choice, rival) if n is not None and n in race.rounds]
    if sees_wait:
        waited = {n: race.waited_kept(n) for n in names}
        taken = sum(len(r) for r in race.rounds.values()) + sum(len(r) for r in race.retaken.values())
        waits = sum(race.waited_kept(n) for n in race.rounds) + sum(len(r) for r in race.retaken.values())
        shares = ", ".join(f"{n} {race.wait_share(n):.0%}" for n in names)
        if any(waited.values()):
            kept = sum(len(race.rounds[n]) for n in names)
            return (f"{sum(waited.values())} of the {kept} runs kept for {' and '.join(names)} waited for a CPU "
                    f"after {race.s.retakes} retakes (time spent waiting: {shares}): another process shared the "
                    f"cores")
        if taken and waits >= race.s.contended_share * taken:
            return (f"{waits} of the {taken} runs of the race waited for a CPU and were retaken (time spent "
                    f"waiting: {shares}): another process shared the cores most of the time; the choice rests "
                    f"on the runs that came through clean")
        return ""
    runs = {n: len(r) for n, r in race.rounds.items()}
    spikes = race.spikes()
    total, spiked = sum(runs.values()), sum(spikes.values())
    if total >= 6 and spiked >= contention_ratio * total:
        return (f"{spiked} of {total} timed runs were spikes (over the spike ratio times the candidate's "
                f"fastest): the cores were shared while it was timed (no run-queue readings on this platform)")
    return ""
