# %% [markdown]
# # 5. Determinism and reproducibility
#
# The second seed article warns that `cudnn.benchmark = True` makes results non-reproducible. Why? Every
# algorithm computes the same convolution, but in a different order of floating-point operations, so their
# outputs differ in the last bits. Benchmark mode picks the algorithm by timing, and timings vary from run to
# run: when two candidates are tied within the timing noise, one run may pick one and the next run the other,
# and the outputs then differ bitwise. This notebook measures each step, then shows how to get bit-identical
# results.

# %%
import hashlib, os, tempfile
import autotune, convalgos    # first: it sets the thread variables that numpy's OpenBLAS reads when it loads
import numpy as np
import matplotlib.pyplot as plt
from autotune import measure
from convalgos import reference

rng = np.random.default_rng(0)
x = rng.standard_normal((2, 32, 32, 32), dtype=np.float32)
w = rng.standard_normal((32, 32, 3, 3), dtype=np.float32)
p = convalgos.ConvParams.from_arrays(x, w, padding=1)
ref = reference.conv2d(x.astype(np.float64), w.astype(np.float64), padding=1)
runnable = [name for name, a in convalgos.ALGORITHMS.items() if a.supports(p)]

def digest(y):
    """A short fingerprint of an array's exact bits."""
    return hashlib.sha256(np.ascontiguousarray(y).tobytes()).hexdigest()[:12]

print("layer:", p, "| algorithms that run it:", runnable)
load = os.getloadavg()[0]
print(f"this machine: {os.cpu_count()} cores, load average {load:.1f}"
      + (" (above the core count: other processes share the cores, timings below are disturbed)"
         if load > os.cpu_count() else ""))

# %% [markdown]
# ## Different algorithms, different bits
#
# Each algorithm's output against direct's: how many of the output elements differ in their bits, by how much
# at most, and the error against the float64 reference (each within its tolerance, or it would not be run).

# %%
outputs = {name: convalgos.conv2d(x, w, padding=1, algo=name) for name in runnable}
base = outputs["direct"]
print(f"{'algorithm':<20}{'bits differ from direct':>24}{'max |diff|':>12}{'error vs f64':>14}  sha256")
for name, y in outputs.items():
    print(f"{name:<20}{np.mean(y != base):>23.1%}{np.max(np.abs(y - base)):>12.1e}"
          f"{reference.normwise_error(y, ref):>14.1e}  {digest(y)}")
print("\ndistinct output bit patterns among", len(outputs), "algorithms:", len({digest(y) for y in outputs.values()}))

# %% [markdown]
# ## The same algorithm twice: the same bits?
#
# Run each algorithm again on the same input. An algorithm is *deterministic* when this always gives the
# same bits (same input, same thread count). On a GPU some algorithms are not: they add partial sums with
# atomic operations, in whatever order the threads finish. Each algorithm here declares whether it fixes its
# summation order; the run checks it once:

# %%
repeats = {}
for name in runnable:
    again = convalgos.conv2d(x, w, padding=1, algo=name)
    repeats[name] = np.array_equal(again, outputs[name])
    print(f"{name:<20} declared deterministic: {convalgos.ALGORITHMS[name].deterministic!s:<6} "
          f"second run bitwise equal: {repeats[name]}")
print("\nevery algorithm repeated its bits:", all(repeats.values()))

# %% [markdown]
# ## What changes between runs: the choice
#
# Each fresh `Tuner` stands for a new run of a program with benchmark mode on (a new process starts with an
# empty table). Four of them tune the same layer on the same input. Each entry lists the candidates the tuner
# found **tied**: medians within the measured noise of the fastest (MAD / median / sqrt(runs), at least 1%);
# among those the tie-break decides, in a fixed order (deterministic first, then smaller workspace, smaller
# error, name), so that noise does not.

# %%
runs = []
for run in range(4):
    tuner = autotune.Tuner(benchmark=True)
    y = tuner.conv2d(x, w, padding=1)
    entry = list(tuner.dispatch_table())[0]
    first, second = sorted(entry.times, key=entry.times.get)[:2]
    runs.append((entry, digest(y)))
    print(f"run {run}: chose {entry.algo:<13} output {digest(y)}   two fastest medians: {first}, {second} "
          f"({entry.times[second] / entry.times[first] - 1:.0%} apart); tied: "
          f"{', '.join(entry.tied) if len(entry.tied) > 1 else 'none'}")
choices = {e.algo for e, _ in runs}
print("\ndistinct choices:", len(choices), "| distinct output bit patterns:", len({d for _, d in runs}))

# %% [markdown]
# Were the candidates really tied? The tuner's verdict rests on a few runs taken during one tuning. Here all
# of them are re-timed together, apart from any tuning (interleaved, 15 rounds), and judged by the same rule:

# %%
samples = measure.interleaved({n: (lambda n=n: convalgos.conv2d(x, w, padding=1, algo=n)) for n in runnable},
                              rounds=15)
medians = {n: measure.median(s) for n, s in samples.items()}
tied = measure.tied_with_fastest(samples, tie_tolerance=0.01)
fastest = tied[0]
for n in sorted(medians, key=medians.get):
    print(f"{n:<20}{medians[n] * 1e3:8.3f} ms  ({medians[n] / medians[fastest]:.2f}x the fastest, noise "
          f"{measure.noise(samples[n]):.1%})" + ("  tied with the fastest" if n in tied and n != fastest else ""))

print()
if len(choices) > 1:
    gaps = {c: medians[c] / medians[fastest] - 1 for c in choices}
    within = [c for c in choices if c in tied]
    print(f"the runs chose {sorted(choices)}; re-timed, they are "
          f"{', '.join(f'{c} +{gaps[c]:.0%}' for c in sorted(choices, key=gaps.get))} from the fastest ({fastest})")
    if len(within) == len(choices):
        print("all the choices are tied within the noise: the flip is a near-tie, decided by noise")
    else:
        print(f"{sorted(set(choices) - set(within))} beyond the noise of the fastest: not a near-tie in this "
              "re-timing, so the tuning that chose it measured what this re-timing does not confirm (its timings "
              "were disturbed, or the machine's speed has changed since)")
else:
    (only,) = choices
    print(f"every run chose {only}; re-timed it is {medians[only] / medians[fastest]:.2f}x the fastest;",
          f"tied with it now: {[n for n in tied if n != only]} (another run could choose one of them)"
          if len(tied) > 1 else "no candidate is tied with the fastest now, so a flip would need a disturbed tuning")

fig, ax = plt.subplots(figsize=(8, 3.5))
order = sorted(medians, key=medians.get)
ax.boxplot([np.array(samples[n]) * 1e3 for n in order], orientation="horizontal")
ax.set_yticks(range(1, len(order) + 1), [n + (" *" if n in choices else "") for n in order], fontsize=8)
ax.set_xscale("log"); ax.set_xlabel("ms per call (15 interleaved rounds)")
ax.set_title("Re-timed candidates; * chosen by at least one of the four runs")
plt.show()

# %% [markdown]
# If the runs above chose differently, you have just seen the non-reproducibility of the article: the same
# program, the same input, different bits. The printout says whether the choices were a near-tie (within the
# measured noise, where a flip is expected) or a gap beyond it (then a tuning was disturbed). If they all
# agreed, the re-timing says whether another candidate is tied with the choice, which is when another run can
# flip it.
#
# ## The `deterministic` flag
#
# `autotune.flags(deterministic=True)` (like `torch.backends.cudnn.deterministic = True`) makes only
# algorithms that are bitwise repeatable eligible. It guarantees that *the chosen algorithm* repeats its bits;
# it does not pin *which* algorithm is chosen. What it excludes here:

# %%
det = autotune.Tuner(benchmark=True, deterministic=True)
det.conv2d(x, w, padding=1)
entry = list(det.dispatch_table())[0]
excluded = {n: why for n, why in entry.skipped.items() if "deterministic" in why}
print("eligible under deterministic=True:", sorted(entry.times))
print("excluded by the flag:", excluded or "none (every algorithm here declares itself deterministic)")
print("the key records the flag:", entry.key.deterministic)

# %% [markdown]
# ## Getting bit-identical runs
#
# To make runs reproducible, the *choice* must be fixed, not only each algorithm:
#
# - `benchmark=False`: the heuristic is a fixed rule (data in `autotune/heuristics.json`), so the same layer
#   always gets the same algorithm, and `deterministic=True` keeps that algorithm's bits fixed;
# - or keep benchmark mode and **pin the table**: tune once, `save` it, and have every later run `load` it
#   (or set `AUTOTUNE_CACHE`): a loaded entry is never re-timed.
#
# A bitwise check of both:

# %%
heuristic = [autotune.Tuner(benchmark=False, deterministic=True).conv2d(x, w, padding=1) for _ in range(3)]
print("benchmark=False, 3 runs bitwise equal:", all(np.array_equal(h, heuristic[0]) for h in heuristic))

path = os.path.join(tempfile.mkdtemp(), "table.json")
first = autotune.Tuner(benchmark=True, deterministic=True)
y0 = first.conv2d(x, w, padding=1)
first.save(path)
pinned, retuned = [], 0
for _ in range(3):
    t = autotune.Tuner(benchmark=True, deterministic=True, cache_path=path)
    pinned.append(t.conv2d(x, w, padding=1))
    retuned += t.cache_info().misses
print(f"benchmark=True with a pinned table: keys re-tuned in 3 runs: {retuned}; 3 runs bitwise equal to the "
      f"tuning run: {all(np.array_equal(y, y0) for y in pinned)} | sha256 {digest(y0)}")

# %% [markdown]
# The same recipe is what PyTorch documents for reproducibility on a GPU: `cudnn.benchmark = False` together
# with `cudnn.deterministic = True`. There the deterministic flag matters more, because cuDNN does have
# non-deterministic algorithms (atomics, in the backward passes especially). On a CUDA machine,
# `python -m bench.gpu_check` times this library's GPU algorithms and a benchmark-mode tuner beside cuDNN with
# benchmark on and off.
