# %% [markdown]
# # 4. Changing shapes: when tuning costs more than it saves
#
# Benchmark mode remembers the best algorithm **per shape** (notebook 3: the values do not matter, the shape
# does). A new shape is a new key and is tuned again: batch size, channels, image height and width, and the
# layer's own parameters are all part of it. The seed article warns that an input going from (8, 3, 224, 224)
# to (8, 3, 112, 112), or a network whose structure keeps changing, makes benchmark mode re-tune, and can make
# the program slower overall. cuDNN says nothing when it happens. Here we measure it, the warning this
# library gives, the opt-in **patience** policy, and three more remedies.
#
# The experiment: one conv layer (16 -> 16 channels, 3x3, batch 2) fed a sequence of images whose size changes:
# first ten new sizes in a row, then the same ten sizes twice more. We add up the time of every call.

# %%
import logging, os, tempfile, time, warnings
import machine      # notebooks/machine.py: the header every notebook prints
machine.describe()
import autotune, convalgos    # first: it sets the thread variables that numpy's OpenBLAS reads when it loads
import numpy as np
import matplotlib.pyplot as plt
from autotune import measure, profile
from autotune.shapes import RetuningWarning

rng = np.random.default_rng(0)
w = rng.standard_normal((16, 16, 3, 3), dtype=np.float32)
sizes = list(range(20, 60, 4))
sequence = sizes * 3
images = {s: rng.standard_normal((2, 16, s, s), dtype=np.float32) for s in sizes}
print("input sizes, in call order:", sequence)
# compile every kernel first: JIT time is a cost of this library, not of benchmark mode
profile.jit_warmup([convalgos.ConvParams.from_arrays(images[sizes[0]], w, padding=1)], "float32")

def cumulative(tuner, prepare=lambda x: x, finish=lambda y: y):
    """Cumulative seconds after each call of the sequence through `tuner`."""
    total, out = 0.0, []
    for s in sequence:
        t = time.perf_counter()
        finish(tuner.conv2d(prepare(images[s]), w, padding=1))
        total += time.perf_counter() - t
        out.append(total)
    return np.array(out)

# %% [markdown]
# ## Benchmark off and on, and what the library says
#
# Every tuning is logged at INFO level on the `autotune` logger (layer, input shape, seconds, choice), and
# `cache_info().layers` counts, per layer (same weights and parameters), the input shapes tuned and the
# seconds spent. Past `retune_warning` distinct shapes of one layer (8 by default) a `RetuningWarning` says
# so, once per layer, with the cost so far and the remedies. We capture both here:

# %%
log = []
handler = logging.Handler(); handler.emit = lambda record: log.append(record.getMessage())
logging.getLogger("autotune").addHandler(handler); logging.getLogger("autotune").setLevel(logging.INFO)

curves = {}
warmup = cumulative(autotune.Tuner(benchmark=False))[-1]      # the first call of each size, whoever makes it
curves["benchmark off"] = cumulative(autotune.Tuner(benchmark=False))
print(f"a first pass over the sequence with benchmark off, not plotted: {warmup:.3f} s; the same again: "
      f"{curves['benchmark off'][-1]:.3f} s (the first call of a new size pays for what is new to it, whatever the "
      f"strategy; the comparisons below start after it)\n")
on = autotune.Tuner(benchmark=True)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always", RetuningWarning)
    curves["benchmark on"] = cumulative(on)

print(f"{len(log)} INFO lines; the first two:")
for line in log[:2]:
    print("  ", line)
retuning = [str(c.message) for c in caught if issubclass(c.category, RetuningWarning)]
print(f"\nRetuningWarning raised {len(retuning)} time(s):")
for message in retuning:
    print("  ", message)
for layer, info in on.cache_info().layers.items():
    print(f"\ncache_info().layers: {info.shapes} input shapes of layer '{layer}', {info.tunings} tunings, "
          f"{info.seconds:.2f} s")

# %% [markdown]
# ## Patience
#
# The remedy offered by this library (proposed by apaszke in pytorch#4392, and not in cuDNN):
# `Tuner(patience=N)` (or `autotune.patience = N`) tunes the first N input shapes of a layer as usual, then
# stops timing new shapes of it and reuses the choice of the nearest tuned shape (in log N, log H, log W).
# Such entries say so in the table (`source == "patience"`). Here with N = 3:

# %%
patient = autotune.Tuner(benchmark=True, patience=3)
curves["patience=3"] = cumulative(patient)
entries = list(patient.dispatch_table())
assert sum(e.source == "benchmark" for e in entries) <= 3   # patience=3: at most three shapes of the layer timed
print(f"{sum(e.source == 'benchmark' for e in entries)} shapes tuned, "
      f"{sum(e.source == 'patience' for e in entries)} reused a tuned shape's choice; one such entry:\n")
print(next(e for e in entries if e.source == "patience").report())

# %% [markdown]
# What did patience give up? For every size where it reused a choice that differs from what full tuning chose
# (the `benchmark on` tuner above), both algorithms are re-timed on that size (interleaved, 9 rounds,
# medians), and their times weighed by the calls of that size in the sequence:

# %%
full = {e.key.params.H: e.algo for e in on.dispatch_table()}
reused = {e.key.params.H: e.algo for e in entries if e.source == "patience"}
differ = {s: (reused[s], full[s]) for s in reused if reused[s] != full[s]}
print(f"patience reused a choice for {len(reused)} sizes; it differs from full tuning's for {len(differ)}")
calls_per_size = sequence.count(sizes[0])
lost = 0.0
for s, (a, b) in differ.items():
    run = lambda n: (lambda: convalgos.conv2d(images[s], w, padding=1, algo=n))
    samples = measure.interleaved({f"{a} (patience)": run(a), f"{b} (tuned)": run(b)}, rounds=9)
    ma, mb = (measure.median(v) for v in samples.values())
    lost += calls_per_size * (ma - mb)
    print(f"  size {s}: {a} {ma * 1e3:.2f} ms against {b} {mb * 1e3:.2f} ms")
saved = on.cache_info().tuning_seconds - patient.cache_info().tuning_seconds
print(f"\npatience saved {saved:.2f} s of tuning and " + (
      f"lost {lost * 1e3:.1f} ms over the {len(sequence)} calls by running its reused choices instead of the "
      f"tuned ones" if lost > 0 else f"lost nothing: re-timed, its reused choices ran {-lost * 1e3:.1f} ms faster "
      f"than the tuned ones over the {len(sequence)} calls"))

# %% [markdown]
# ## Three more remedies
#
# 1. **Fix the input size.** Pad (or resize) every input to one size, so there is one key: one tuning,
#    at the price of computing the padding. Here: zero-pad to the largest size and crop the output.
# 2. **A persistent cache.** Save the table (`autotune.save(path)`, or set `AUTOTUNE_CACHE=path` so it is
#    loaded on first use and saved after each tuning); the next process (next epoch, next run of the program)
#    starts with every shape already tuned. Here: a fresh tuner loading what the first one saved.
# 3. **`benchmark_limit`.** Time only the N best-ranked candidates (ranked by the heuristic), so each new shape
#    costs less to tune, at the risk of missing the best one.

# %%
warnings.simplefilter("ignore", RetuningWarning)      # shown once above; these tuners would repeat it
largest = max(sizes)
def pad(x):
    return np.pad(x, ((0, 0), (0, 0), (0, largest - x.shape[2]), (0, largest - x.shape[3])))
curves["fixed size (padded)"] = cumulative(autotune.Tuner(benchmark=True), prepare=pad)

path = os.path.join(tempfile.mkdtemp(), "autotune-cache.json")
on.save(path)
warm = autotune.Tuner(benchmark=True, cache_path=path)
curves["persistent cache (warm)"] = cumulative(warm)
print(f"warm cache: {warm.cache_info().misses} misses, {warm.cache_info().hits} hits")
assert warm.cache_info().misses == 0                       # the persistent cache's lesson: nothing is tuned again

limited = autotune.Tuner(benchmark=True, benchmark_limit=2)
curves["benchmark_limit=2"] = cumulative(limited)
print(f"benchmark_limit=2: {limited.cache_info().tuning_seconds:.2f} s of tuning against "
      f"{on.cache_info().tuning_seconds:.2f} s with every candidate")
logging.getLogger("autotune").removeHandler(handler)

# %%
fig, ax = plt.subplots(figsize=(8, 4.2))
for label, c in curves.items():
    ax.plot(np.arange(1, len(c) + 1), c, label=label, marker=".")
ax.axvline(len(sizes) + 0.5, color="gray", ls=":", lw=1)
ax.text(len(sizes) + 1, ax.get_ylim()[1] * 0.9, "sizes start repeating", fontsize=8, color="gray")
ax.set_xlabel("call"); ax.set_ylabel("cumulative time (s)"); ax.legend(fontsize=8)
ax.set_title("One conv layer, input size changing")
plt.show()

off_total = curves["benchmark off"][-1]
print(f"{'strategy':<26}{'after 10 calls':>15}{'after 30 calls':>15}{'/ benchmark off':>17}")
for label, c in curves.items():
    print(f"{label:<26}{c[len(sizes) - 1]:>13.3f} s{c[-1]:>13.3f} s{c[-1] / off_total:>16.2f}x")
late = {label: c[-1] - c[2 * len(sizes) - 1] for label, c in curves.items()}     # the last 10 calls: all hits
print(f"\nover these 30 calls benchmark mode took {curves['benchmark on'][-1] / off_total:.2f}x the time of "
      f"benchmark off; its last 10 calls (every size tuned, all hits) took "
      f"{late['benchmark on'] / late['benchmark off']:.2f}x theirs")
again = cumulative(autotune.Tuner(benchmark=False))[-1]
spread = abs(again - off_total) / min(again, off_total)
print(f"benchmark off, run again now: {again:.3f} s against {off_total:.3f} s: two runs of the same thing differ by "
      f"{spread:.0%}, so a strategy counts as cheaper than benchmark off only below that")
cheaper = [k for k in curves if k != "benchmark off" and curves[k][-1] < off_total * (1 - spread)]
level = [k for k in curves if k != "benchmark off" and k not in cheaper and curves[k][-1] <= off_total * (1 + spread)]
print("cheaper than benchmark off over the 30 calls:", cheaper or "none",
      "| level with it (within that spread):", level or "none")
print(f"patience=3 against plain benchmark mode: {curves['patience=3'][-1]:.2f} s against "
      f"{curves['benchmark on'][-1]:.2f} s over the 30 calls")

# %% [markdown]
# Reading the curves: with benchmark on, every new size costs a tuning (the steps during the first ten
# calls), which the table above compares with the cost of the calls themselves; once the sizes repeat, the
# curve runs at the speed of the tuned choices. Whether the steps are ever paid back depends on how much
# faster the tuned choices are than the heuristic's (the "last 10 calls" ratio) and on how often each size
# repeats: the printout says which way it went on this run. Patience bounds the steps to N per layer, at the
# price of running an untimed choice on the other sizes (what it lost is printed above); one size means one
# tuning; a warm persistent cache means none; a `benchmark_limit` makes each step smaller.
#
# The same holds for a network whose structure changes between calls (every new layer shape is a new key),
# and for the last, smaller batch of an epoch (a new batch size is a new key: dropping or padding the last
# batch avoids it; notebook 6 trains a network with it). On a GPU the tuning steps are milliseconds rather
# than tenths of a second, but the calls are faster too, so the trade-off has the same shape.
# `python -m autotune --model resnet18 --cache PATH` run twice shows the persistent cache on a full network
# (the second run times nothing).
