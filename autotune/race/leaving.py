"""When a candidate leaves the race (``rounds.py``): after each round, every candidate still racing is
either left in or leaves as

- screened, after round 0 (the checked calls that are evidence, ``tuning.first_touch_free``), when its checked
  call less all its threads' waits took at least ``screen_ratio`` times the fastest checked call: a 2x slower
  candidate costs its checked call alone;
- abandoned, when one run, less all its threads' waits for a CPU and with no page fault (``Race.floor``: a lower
  bound of its undisturbed time, since noise only adds time), or all of its runs (warm-up included) over two
  clean runs or three of any kind, took at least ``abandon_ratio`` times the leader's median: a 5x slower
  candidate costs its checked call, or two or three runs;
- settled, when two clean race runs show its fastest over ``settle_ratio`` times the leader's median: it cannot
  tie (a short call's checked call, which screens only, is not one of the two, unless its fastest is over
  ``spike_ratio`` times that: more than one run's disturbance could add; a run that waited counts by its floor,
  its time less every thread's wait, until its retakes are stuck: ``waited_floors``);
- done, with ``min_runs`` clean runs and its median known to ``precision`` (MAD/median/sqrt(n)), or when the
  rounds have cost ``cost_cap`` times the leader's median (or ``time_budget`` seconds) and it has ``min_runs``
  clean runs (or twice as many of any kind); at ``max_runs`` in any case.

Why one run's floor may abandon: measured here (2026-12-05, AMD EPYC, the regret bench's 12 layers), a
candidate's first call in a second tuning, with no page fault, took 0.5-1.6x its median in the race, and the
machine's own speed swings move one algorithm up to 2.4x between seconds (``bench/results/cpu-speed-states.md``):
under the 3x of ``abandon_ratio``. A candidate within it gets a second run before it is judged.

Why a short call settles on two race runs, not its checked call and one: measured here (2026-12-05, AMD EPYC),
in the regret bench's sequence, the depthwise layer tuned after the other eleven: for minutes at a time the first
sample of round 1 ran 1.2-1.4x the later ones (0.14-0.16 ms against 0.12), and ``depthwise``, the fastest, was
settled on it and its checked call behind ``direct`` and ``implicit_gemm`` (11-16% regret) in 9 of 12 tunings.
Asking a second race run of every candidate within 2x (``screen_ratio``) cost 8x the choice's time more per
tuning (median of the 12 layers, 52x to 60x, measured interleaved); asking it only within 1.65x
(``spike_ratio`` x ``settle_ratio``), where one disturbed run could hide a tie, costs less.

Why a warm-up settles nothing: a checked call is a warm-up, not round 0, when it compiled or took page faults
(its workspace's first touch), and the first calls after it in the process can still run slow. Measured
(2026-12-06, AMD EPYC, ResNet-18's C256 14px layer, the first tuning in four fresh processes): in two,
``winograd_fused_4x4``'s warm-up (2.3 and 7.6 ms; such a first call took 893 page faults, measured apart) and one
or two race runs (1.6, 2.1 ms) settled it behind ``direct`` (1.32, 1.74 ms), though in one of them it ran 1.20 ms
against ``direct``'s 1.32 in the warm tuning a second later: the regret bench's first tunings kept ``direct``
there at +7-12% in three processes of six.
Settling takes two race runs, as for any candidate; abandoning at ``abandon_ratio`` may still count the
warm-up among all of its runs. Warm tunings cost the same (the 12 layers, 8 interleaved pairs of the two rules:
218 against 220 ms). It did not end that miss: in the bench's next run the first tunings still kept ``direct``
there (+4-10%), the fused Winograd's race runs in a first tuning taking 1.5-1.9 ms for five to nine rounds.

Why round 0 screens at 2x: its checked calls are all of one kind (a single call after another candidate's
call and check), so their ratios are fairer than one such call against a median of race samples. Measured here
(2026-12-05, AMD EPYC, the regret bench's 12 layers, 4 warm tunings each, 264 candidates with a round 0): every
candidate that ended within 1.15x of the best had a checked call under 1.4x the fastest one, none within 1.5x
of the best had one over 1.8x; 42 had one of 2-3x, and each then cost two more calls (round 1's untimed lead and
its sample) before ``abandon_ratio`` or ``settle_ratio`` let it go.
"""
from __future__ import annotations

from ..measure import noise


def still_active(race, active: list) -> list:
    """The names of ``active`` that stay in the race after this round."""
    if not race.rounds:
        return []
    leader = race.leader()
    best, over = race.typical(leader), over_budget(race)
    return [n for n in active if n in race.rounds and continues(race, n, leader, best, over)]


def over_budget(race) -> bool:
    """The rounds have cost ``cost_cap`` times the leader's median, or ``time_budget`` seconds."""
    s = race.s
    return bool(race.rounds) and race.spent >= min(s.time_budget, s.cost_cap * race.typical(race.leader()))


def continues(race, name: str, leader: str, best: float, over: bool) -> bool:
    """Whether ``name`` runs another round (the module docstring's rules); an abandoned one is recorded with
    its reason in ``race.abandoned``."""
    s, runs = race.s, race.samples[name]
    if not runs:
        return True                     # its checked call was a warm-up only: it has yet to run
    clean = race.kept_steps(name) if race.stuck.get(name, 0) >= 2 else race.clean(name)  # its runs wait: so judged
    warm_up = [] if 0 in race.rounds[name] else [race.warmup[name]]    # else its warm-up is run 0
    every = runs + warm_up
    first = warm_up or ([runs[0]] if race.screening(name) else [])     # the run that is not a step run
    # evidence that it is slow, to abandon it at abandon_ratio: runs that waited count too (waiting only adds time)
    evidence = len(race.kept_steps(name)) + any(t <= s.spike_ratio * min(every) for t in first)
    # evidence that it cannot tie, to settle it: its clean runs and the floors of its runs that waited
    # (``waited_floors``), a screening checked call only with one of them; never a warm-up (module docstring)
    calm = clean + waited_floors(race, name)
    screen = [runs[0]] if race.screening(name) and runs[0] <= s.spike_ratio * min(every) else []
    lowest = min(calm + screen, default=0.0)
    floor = max((f for f in map(race.floor, race.rounds[name].values()) if f is not None), default=0.0)
    fastest = min(every)
    if name != leader and best > 0:
        if race.done == 1 and s.screen_ratio and floor >= s.screen_ratio * best:    # round 0: checked calls alone
            race.abandoned[name] = (f"its checked call took {floor / best:.1f}x the fastest checked call less its "
                                    f"threads' waits for a CPU, with no page fault (screen_ratio={s.screen_ratio})")
            return False
        if floor >= s.abandon_ratio * best:
            race.abandoned[name] = (f"a run of it took {floor / best:.1f}x the best median less its threads' waits "
                                    f"for a CPU, with no page fault (abandon_ratio={s.abandon_ratio})")
            return False
        if (evidence >= 2 or len(every) >= 3) and fastest >= s.abandon_ratio * best:
            race.abandoned[name] = (f"all {len(every)} of its runs{' (warm-up included)' if warm_up else ''} took at "
                                    f"least {fastest / best:.1f}x the best median (abandon_ratio={s.abandon_ratio})")
            return False
        one_run = bool(calm and screen) and lowest > s.spike_ratio * s.settle_ratio * best   # past what one
        if (len(calm) >= 2 or one_run) and lowest > s.settle_ratio * best:                  # run's noise adds
            return False                # it cannot tie the best: its median needs no more precision
    if len(runs) >= s.max_runs or (over and (len(clean) >= s.min_runs or len(runs) >= 2 * s.min_runs)):
        return False
    return len(clean) < s.min_runs or not (over or noise(clean) <= s.precision)


def waited_floors(race, name: str) -> list:
    """The floors (``Race.floor``: time less every thread's wait, no page fault) of ``name``'s step runs that
    waited for a CPU and are not spikes above its fastest: lower bounds of its undisturbed time, evidence that it
    cannot tie (a run's seconds that waited are not: beside neighbours that come and go, ``winograd_fused_4x4``
    was settled on two runs that waited 60% and more, 2.8x ``direct``'s clean ones, and ``direct`` kept; their
    floors, 0.7-1.0x, settle nothing). Measured quiet (2026-12-05, AMD EPYC, ResNet-18's C256 14px layer):
    ``im2col`` ran 3.3 ms a call with its BLAS pool beside Numba's on two cores, waiting 1.45 ms of it, floor
    1.8 ms against the best's 1.3 ms, and was retaken for 8-11 calls, never settled, where two floors settle it."""
    fastest = min(race.samples[name], default=0.0)
    floors = (race.floor(sample) for sample in race.step_rounds(name).values()
              if race.waited(sample) and sample.seconds <= race.s.spike_ratio * fastest)
    return [f for f in floors if f is not None]
