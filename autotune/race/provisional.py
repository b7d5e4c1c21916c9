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

The rule: the choice is provisional when another process shared the cores (``Race.shared``): it had a task
runnable before at least ``neighbour_share`` of the race's samples, or every candidate timed more than once had
over ``contended_share`` of its runs (retaken ones included) wait for a CPU more than ``wait_share`` of their
time. A neighbour was there most of the time, and even a sub-millisecond run that came through clean between
two of its time slices is what the call costs in a quiet moment, not in a contended second. One candidate's
waits alone are its own (a BLAS pool beside Numba's: three threads on two cores, quiet machine or not) and mark
nothing. The waits alone missed most: beside one process spinning on a core, sub-millisecond Numba calls (two
threads) often ran between its time slices unwaited, and 8 of 12 races marked nothing. Measured here
(2026-12-05, the regret bench's 12 layers, torch imported first): another process runnable before 100% of the
samples of every race beside that neighbour, before 0-57% on the quiet machine (short-lived system tasks, and
this process's own workers caught between two states by the two reads). Where the platform cannot see waiting
(``contention.RusageReader``, ``NullReader``), spikes stand in: at least ``contention_ratio`` of the timed runs
were spikes.
"""
from __future__ import annotations


def provisional(race, sees_wait: bool, contention_ratio: float) -> str:
    """Why the race's choice is provisional ("" when it is not)."""
    if sees_wait:
        if not shared(race):
            return ""
        shares = ", ".join(f"{n} {waited_share(race, n):.0%} of its runs, {race.wait_share(n):.0%} of its time"
                           for n in race.rounds)
        seen = neighbour_share_seen(race)
        if seen is not None and seen >= race.s.neighbour_share:
            return (f"another process had a task runnable before {seen:.0%} of its samples (at least "
                    f"{race.s.neighbour_share:.0%} marks it); runs that waited for a CPU: {shares}")
        return (f"every candidate's runs waited for a CPU (over {race.s.contended_share:.0%} of them; {shares}): "
                f"another process shared the cores")
    runs = {n: len(r) for n, r in race.rounds.items()}
    spikes = race.spikes()
    total, spiked = sum(runs.values()), sum(spikes.values())
    if total >= 6 and spiked >= contention_ratio * total:
        return (f"{spiked} of {total} timed runs were spikes (over the spike ratio times the candidate's "
                f"fastest): the cores were shared while it was timed (no run-queue readings on this platform)")
    return ""


def waited_share(race, name: str) -> float:
    """The share of the runs of ``name`` taken (retaken ones included) that waited for a CPU."""
    taken = list(race.rounds[name].values()) + race.retaken[name]
    return sum(map(race.waited, taken)) / len(taken) if taken else 0.0


def contended(race) -> bool:
    """Whether every candidate timed more than once had over ``contended_share`` of its runs wait for a CPU,
    leaving out those whose waits the race found to be their own (``Race.waits_are_own``). One candidate's
    waits alone are its own threads' (a BLAS pool beside Numba's on two cores: measured quiet here, im2col's and
    the non-fused Winograds' runs wait 19-56% of their time, Numba-only ones 0%), which a step pays too: they
    mark nothing. Until 2026-12-06 a race whose other candidates all left after their checked call judged the
    one left, its own threads' waits and all, and marked its choice provisional on a quiet machine."""
    taken = {n: len(r) + len(race.retaken[n]) for n, r in race.rounds.items() if not race.waits_are_own(n)}
    judged = [n for n in taken if taken[n] >= 2] or [n for n in taken if taken[n]]
    return bool(judged) and min(waited_share(race, n) for n in judged) > race.s.contended_share


def stayed(race) -> bool:
    """Whether the retakes could not clean the race: ``contended``, beside a neighbour that stayed (seen
    runnable before ``neighbour_share`` of the samples, or unseen); blocks of calls then decide
    (``blocks.py``). Beside neighbours that come and go the retakes find clean runs, and the choice rests on
    them: traced (2026-12-05, two bursty neighbours), ``winograd_fused_4x4``'s clean runs 0.48 ms against
    ``direct``'s 0.93, contended by the retaken runs, and blocks under the bursts kept ``direct``."""
    seen = neighbour_share_seen(race)
    return contended(race) and (seen is None or seen >= race.s.neighbour_share)


def shared(race) -> bool:
    """Whether another process shared the cores while the race ran: another process had a task runnable
    before at least ``neighbour_share`` of the samples (``neighbour_share_seen``), or ``contended``."""
    seen = neighbour_share_seen(race)
    return (seen is not None and seen >= race.s.neighbour_share) or contended(race)


def neighbour_share_seen(race) -> float | None:
    """The share of every sample taken (retaken ones included) just before which another process had a task
    runnable; None where the platform cannot tell."""
    seen = [s.neighbours for n, r in race.rounds.items() for s in list(r.values()) + race.retaken[n]
            if s.neighbours is not None]
    return sum(v > 0 for v in seen) / len(seen) if seen else None
