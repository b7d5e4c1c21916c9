# %% [markdown]
# # 3. Shapes, not values
#
# Benchmark mode times each algorithm **once per input shape** and reuses the winner for every later input
# of that shape, whatever its values. That is sound only if the running time depends on the shape and not on
# the values. The seed article puts it this way: with the input size fixed, a conv layer's time is nearly
# constant "whether each pixel is 0.1 or 1000.0". Here we measure that claim, and its caveats.
#
# The algorithms do the same arithmetic, in the same order, for any values: the loops, the FFT sizes and the
# GEMM shapes are fixed by the shape alone. Values can only matter through the hardware: a multiply whose
# operand or result is a *subnormal* float (float32 below about 1.2e-38) can take a slow path on some CPUs,
# and a kernel that skipped zeros would be faster on sparse input (none here does).

# %%
import machine      # notebooks/machine.py: the header every notebook prints
machine.describe()
import autotune, convalgos    # first: it sets the thread variables that numpy's OpenBLAS reads when it loads
import numpy as np
import matplotlib.pyplot as plt
from autotune import measure

rng = np.random.default_rng(0)
shape_x, shape_w = (2, 16, 64, 64), (16, 16, 3, 3)
w = rng.standard_normal(shape_w, dtype=np.float32) * np.float32(0.1)
tiny = np.finfo(np.float32).tiny            # the smallest normal float32
inputs = {
    "random N(0,1)": rng.standard_normal(shape_x, dtype=np.float32),
    "constant 0.1": np.full(shape_x, 0.1, np.float32),
    "constant 1000": np.full(shape_x, 1000.0, np.float32),
    "random x 1e30": rng.standard_normal(shape_x, dtype=np.float32) * np.float32(1e30),
    "zeros": np.zeros(shape_x, np.float32),
    "subnormal (~1e-40)": rng.standard_normal(shape_x, dtype=np.float32) * np.float32(1e-40),
}
print("smallest normal float32:", tiny, "| is 1e-40 subnormal?", 0 < np.float32(1e-40) < tiny)
print("fraction of subnormal entries in the last input:",
      np.mean((inputs["subnormal (~1e-40)"] != 0) & (np.abs(inputs["subnormal (~1e-40)"]) < tiny)))

# %% [markdown]
# Each algorithm is timed on every input in interleaved rounds (one run per input per round, the order
# rotated each round, 9 rounds after a warm-up: `autotune.measure.interleaved`), so load from other processes
# hits all inputs alike. Each time is the median of its runs, shown relative to the random input's.
#
# Is a ratio different from 1? Each median has a measured noise, `measure.noise`: MAD / median / sqrt(runs),
# the tuner's estimate. For normally distributed runs the standard error of a median is about 1.86 times
# that, so the ratio of two medians has a relative standard error of about 1.86 * sqrt(noise1² + noise2²).
# A ratio counts as a **deviation** when it is more than 3 such standard errors from 1 (25 cases are tested,
# so a looser rule would flag some by chance alone). Load can still push a ratio past it, so the whole
# measurement is taken **twice**, independently: a deviation the values cause repeats, in the same
# direction; one that load caused does not, as a rule.

# %%
algos = ["direct", "implicit_gemm", "im2col", "fft_tiled", "winograd_4x4"]
BASE = "random N(0,1)"

def measure_ratios():
    """algorithm -> input -> (ratio of medians to the random input's, deviates beyond the noise?)."""
    out, base_ms = {}, {}
    for a in algos:
        calls = {k: (lambda v=v, a=a: convalgos.conv2d(v, w, padding=1, algo=a)) for k, v in inputs.items()}
        samples = measure.interleaved(calls, rounds=9)
        base_ms[a] = measure.median(samples[BASE]) * 1e3
        out[a] = {}
        for k in inputs:
            ratio = measure.median(samples[k]) / measure.median(samples[BASE])
            error = 1.86 * np.hypot(measure.noise(samples[k]), measure.noise(samples[BASE]))
            out[a][k] = (ratio, k != BASE and abs(ratio - 1) > 3 * error, 3 * error)
    return out, base_ms

first, base_ms = measure_ratios()
second, _ = measure_ratios()
names = [k for k in inputs if k != BASE]
print(f"{'input':<20}" + "".join(f"{a:>15}" for a in algos) + "    (ratio in measurement 1 / 2; * = deviates)")
print(f"{'(random, ms)':<20}" + "".join(f"{base_ms[a]:>15.2f}" for a in algos))
for k in names:
    cells = [f"{first[a][k][0]:.2f}{'*' if first[a][k][1] else ' '}/{second[a][k][0]:.2f}"
             f"{'*' if second[a][k][1] else ' '}" for a in algos]
    print(f"{k:<20}" + "".join(f"{c:>15}" for c in cells))
bands = [f"±{max(first[a][k][2] for k in names):.2f}/{max(second[a][k][2] for k in names):.2f}" for a in algos]
print(f"{'(widest band: 3 SE)':<20}" + "".join(f"{b:>15}" for b in bands))
print("a ratio deviates when it is further from 1 than its own band; a noisy algorithm's band is wide, so a\n"
      "ratio far from 1 can still be within its noise (the band row shows the widest of its cases)")

# %%
fig, ax = plt.subplots(figsize=(9, 3.8))
width = 0.8 / len(algos)
for j, a in enumerate(algos):
    xs = np.arange(len(names)) + j * width
    ax.bar(xs, [first[a][k][0] for k in names], width, label=a)
    ax.plot(xs, [second[a][k][0] for k in names], "k.", markersize=5)
ax.axhline(1, color="k", lw=0.5)
ax.set_xticks(np.arange(len(names)) + 0.4); ax.set_xticklabels(names, fontsize=8, rotation=15)
ax.set_ylabel("median time / on random input"); ax.legend(fontsize=8, ncol=3)
ax.set_title("Same shape, different values (bars: measurement 1, dots: measurement 2)")
plt.show()

repeatable, once = [], []
for a in algos:
    for k in names:
        (r1, d1, _), (r2, d2, _) = first[a][k], second[a][k]
        if d1 and d2 and (r1 > 1) == (r2 > 1):
            repeatable.append((a, k, r1, r2))
        elif d1 or d2:
            once.append((a, k))
cases = len(algos) * len(names)
print(f"{cases - len(repeatable) - len(once)} of {cases} (algorithm, input) cases ran at the random input's "
      f"speed within the noise in both measurements; {len(once)} deviated in one measurement only (not "
      f"repeatable), {len(repeatable)} deviated in both, in the same direction:")
for a, k, r1, r2 in repeatable:
    print(f"  {a:<14} on {k:<20} {r1:.2f}x and {r2:.2f}x the random input's time")
subnormal = [(a, r1, r2) for a, k, r1, r2 in repeatable if k.startswith("subnormal") and min(r1, r2) > 1]
print("subnormal input repeatably slower for:",
      ", ".join(f"{a} ({min(r1, r2):.2f}-{max(r1, r2):.2f}x)" for a, r1, r2 in subnormal) or "no algorithm")

# %% [markdown]
# How to read it: the printout lists the cases where the values changed the time beyond the measured noise,
# in both measurements. Where it lists none, this run supports the article's claim; where it lists some, look
# at their size and their input: a deviation that repeats on normal-valued inputs (constants, huge values,
# zeros) would contradict the claim for that algorithm on this machine, and one on the subnormal input is
# the known hardware caveat. Where subnormals are slower, the CPU took its slow path for subnormal operands
# (how much depends on the CPU model and on the instruction mix, which is why the algorithms can differ).
#
# Two consequences, where the values do not matter:
#
# - **Tuning on random input is enough.** The choice depends only on the relative times. Below, three tuners
#   tune the same layer: twice on the same random input (to see how much the choice moves from timing noise
#   alone) and once on a constant image.
# - **The caveat is narrow.** Activations that decay into the subnormal range (badly scaled networks, long
#   chains of small multipliers) can run slower than the tuning input did, on CPUs with a slow path. The
#   remedies are the usual ones: keep activations well scaled (normalisation layers do), or set the CPU's
#   flush-to-zero mode, as many GPU kernels do by default.

# %%
runs = []
for label in ("random N(0,1)", "random N(0,1)", "constant 0.1"):
    tuner = autotune.Tuner(benchmark=True)
    tuner.conv2d(inputs[label], w, padding=1)
    entry = list(tuner.dispatch_table())[0]
    runs.append((label, entry))
    ranking = sorted(entry.times, key=entry.times.get)
    tied = ", ".join(entry.tied) if len(entry.tied) > 1 else "none"
    print(f"tuned on {label:<14}: chose {entry.algo:<19} ranking {ranking[:4]}...  tied in the tuning: {tied}")

(_, r1), (_, r2), (_, c) = runs
agree = r1.algo == r2.algo
print("\ntwo tunings on the same random input chose the same algorithm:", agree)
if not agree:
    both_tied = any({r1.algo, r2.algo} <= set(e.tied) for e in (r1, r2))      # tied within one tuning
    print("  the same input gave different choices: timing noise, not the values;",
          "the two choices were tied within the noise in a tuning (notebook 5)" if both_tied else
          "neither tuning found them tied, so the timings of at least one were disturbed (notebook 5)")
print("the tuning on the constant input chose one of the random-input choices:", c.algo in {r1.algo, r2.algo},
      "" if c.algo in {r1.algo, r2.algo} else
      f"(it chose {c.algo}; tied with them in its tuning: {bool({r1.algo, r2.algo} & set(c.tied))})")

# %% [markdown]
# The seed article's second half follows from this: since only the shape matters, benchmark mode must
# re-tune whenever the shape changes, which is the subject of notebook 4.
