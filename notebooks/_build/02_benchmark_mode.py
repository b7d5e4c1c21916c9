# %% [markdown]
# # 2. Benchmark mode: what `cudnn.benchmark = True` does
#
# With `torch.backends.cudnn.benchmark = False` (the default) PyTorch asks cuDNN's *heuristics* which
# algorithm to use for a convolution: a fixed rule, no measurement. With `True`, the first time a layer of a
# given shape is seen, every applicable algorithm is **run and timed on the real input**, the fastest is
# remembered for that shape, and every later call of that shape uses it. A little time is spent once; every
# later call runs the measured fastest, which is faster than the heuristic's pick only where the heuristic
# picked wrong.
#
# `autotune` does the same, in the open, over the algorithms of notebook 1:
#
# ```python
# import autotune
# autotune.benchmark = True           # like torch.backends.cudnn.benchmark = True
# y = autotune.conv2d(x, w, padding=1)
# print(autotune.dispatch_table())    # what was timed, what won, and why
# ```
#
# Here is its own description of a tuning (the module docstring of `autotune.tuning`):

# %%
import inspect, time
started = time.perf_counter()
import machine      # notebooks/machine.py: the header every notebook prints
machine.describe()
import autotune, convalgos    # first: it sets the thread variables that numpy's OpenBLAS reads when it loads
import numpy as np
import matplotlib.pyplot as plt
from autotune import measure, models, nn, profile

print()
print(inspect.getdoc(autotune.tuning).split("\n\n", 1)[1])

# %% [markdown]
# Numba compiles each kernel on its first call (and caches it on disk for the next process). That compile
# time is a cost of this library, not of benchmark mode, so we run every algorithm once on a small copy of
# each layer first to keep it out of the measurements below.
#
# Comparisons below are judged the way the tuner judges its candidates (`autotune.measure`): interleaved
# rounds, the median of each, and a **tie** when two medians are within the measured noise of each other
# (MAD / median / sqrt(runs), at least 1%).

# %%
def compare(samples, a, b):
    """How a's median compares with b's, in words, by the tuner's tie rule: (verdict, words, b / a)."""
    ma, mb = measure.median(samples[a]), measure.median(samples[b])
    tied = measure.tied_with_fastest({a: samples[a], b: samples[b]}, tie_tolerance=0.01)
    noise = max(measure.noise(samples[a]), measure.noise(samples[b]), 0.01)
    if len(tied) == 2:
        return "tie", f"{a} and {b} tie ({mb / ma:.2f}x, within the noise of {noise:.1%})", mb / ma
    word = "faster" if ma < mb else "slower"
    return word, f"{a} is {max(ma, mb) / min(ma, mb):.2f}x {word} than {b} (noise {noise:.1%})", mb / ma

BATCH = 2                 # the articles' layer has 64 images; 32x fewer keep this notebook short
seed_x = np.random.default_rng(0).standard_normal((BATCH, 3, 256, 256), dtype=np.float32)
seed_w = np.random.default_rng(1).standard_normal((64, 3, 3, 3), dtype=np.float32)
t = time.perf_counter()
profile.jit_warmup([convalgos.ConvParams.from_arrays(seed_x, seed_w, padding=1)], "float32")
print(f"compiled / loaded every kernel in {time.perf_counter() - t:.1f} s")

# %% [markdown]
# ## The articles' layer, benchmark off and on
#
# The second article times `Conv2d(3, 64, 3, padding=1)` on a (64, 3, 256, 256) input. A batch of 64 takes
# seconds per call on 2 CPU cores, so this notebook runs the same layer at **batch 2** (`BATCH` above). The
# per-call time scales about linearly with the batch; the choice can change with it, which is why the batch
# is part of the key.
#
# Two tuners, one with benchmark off (the heuristic picks, nothing is timed) and one with benchmark on. The
# first call of each is timed alone; then their steady calls are timed in interleaved rounds.

# %%
off = autotune.Tuner(benchmark=False)
on = autotune.Tuner(benchmark=True)
first = {}
for label, tuner in (("benchmark off", off), ("benchmark on", on)):
    t = time.perf_counter(); tuner.conv2d(seed_x, seed_w, padding=1); first[label] = time.perf_counter() - t
steady = measure.interleaved({"benchmark off": lambda: off.conv2d(seed_x, seed_w, padding=1),
                              "benchmark on": lambda: on.conv2d(seed_x, seed_w, padding=1)}, rounds=15)
off_entry, on_entry = list(off.dispatch_table())[0], list(on.dispatch_table())[0]
print(on.dispatch_table())

# %% [markdown]
# Where did the tuning's seconds go? Each candidate's calls are in the entry (`entry.calls`, `entry.spent`): its
# checked call (the float64 check needs one real call; where it touched no fresh memory it is also the race's
# first run), then its race samples, a short call timed right after a call of its own (an untimed one, or its
# previous sample: as a step runs it). A candidate whose checked call took 2x the fastest checked call leaves on
# that call alone, one 3x slower than the best after one or two calls, the close ones run on. The rest of the
# tuning is Numba loading each candidate's kernels on its first call (JIT, kept out of every time), the check (the
# float64 reference on a sample, and two passes over the whole output per candidate: filled with NaN before its
# checked call, the NaN left counted after) and the race's bookkeeping:

# %%
cost = dict(on_entry.spent)
statistic = "mean" if getattr(on_entry, "mean_times", False) else "median"     # the table's (a contended race: mean)
for n in sorted(cost, key=cost.get, reverse=True):
    timed = f"{statistic} {on_entry.times[n] * 1e3:.1f} ms" if n in on_entry.times else on_entry.skipped.get(n, "")
    print(f"{n:<20}{cost[n]:7.3f} s  ({on_entry.calls[n]} calls, {len(on_entry.samples.get(n, []))} timed runs kept, "
          f"{timed[:60]})")
assert on_entry.algo in on_entry.tied or on_entry.times[on_entry.algo] == min(on_entry.times.values())
costliest = max(cost, key=cost.get)
print(f"\ntuning {on_entry.tuning_seconds:.2f} s: the candidates' calls above {sum(cost.values()):.2f} s, of which "
      f"{costliest} {cost[costliest]:.2f} s ({cost[costliest] / on_entry.tuning_seconds:.0%} of the tuning); the rest "
      f"{on_entry.tuning_seconds - sum(cost.values()):.2f} s, of which Numba loading kernels (JIT) "
      f"{sum(on_entry.jit.values()):.2f} s. The chosen {on_entry.algo} runs in "
      f"{on_entry.times[on_entry.algo] * 1e3:.1f} ms")

# %%
print(f"{'':<16}{'algorithm':>14}{'first call':>12}{'steady (median)':>17}")
for label, entry in (("benchmark off", off_entry), ("benchmark on", on_entry)):
    print(f"{label:<16}{entry.algo:>14}{first[label] * 1e3:>10.0f}ms{measure.median(steady[label]) * 1e3:>15.2f}ms")
verdict, words, _ = compare(steady, "benchmark on", "benchmark off")
print("\nsteady state:", words)
gain = measure.median(steady["benchmark off"]) - measure.median(steady["benchmark on"])
if on_entry.algo == off_entry.algo:
    print(f"both modes run {off_entry.algo}: the heuristic already picked what the tuning found fastest, so "
          f"the {on_entry.tuning_seconds:.2f} s of tuning bought nothing on this layer"
          + ("" if verdict == "tie" else "; the steady difference above is then not the choice's: it is how "
             "far two identical calls drift apart on this machine now (more than the noise estimate allows)"))
elif verdict == "faster":
    print(f"the tuned choice pays: its {on_entry.tuning_seconds:.2f} s of tuning are paid back after about "
          f"{on_entry.tuning_seconds / gain:.0f} calls of this shape")
else:
    print(f"the tuned choice ({on_entry.algo}) does not run faster than the heuristic's ({off_entry.algo}) "
          f"in this re-measurement: the {on_entry.tuning_seconds:.2f} s of tuning are not paid back")
    if off_entry.algo in on_entry.times:
        print(f"during the tuning: {on_entry.algo} {on_entry.times[on_entry.algo] * 1e3:.2f} ms, "
              f"{off_entry.algo} {on_entry.times[off_entry.algo] * 1e3:.2f} ms (medians)")

fig, ax = plt.subplots(figsize=(7, 2.6))
ax.boxplot([np.array(steady[k]) * 1e3 for k in steady], orientation="horizontal")
ax.set_yticks([1, 2], [f"{k}\n({e.algo})" for k, e in zip(steady, (off_entry, on_entry))])
ax.set_xlabel("steady call (ms)"); ax.set_title(f"{BATCH}x3x256x256 -> 64, 3x3: 15 interleaved rounds", fontsize=10)
plt.tight_layout(); plt.show()

# %% [markdown]
# The printout says which case this run is. There are three: the heuristic already picks the fastest (then
# benchmark mode only costs the tuning), the tuning finds a faster algorithm (then it pays after the
# break-even number of calls printed), or the tuning's choice is no faster when re-measured (possible when two
# are tied, or when load during the tuning disturbed it). Where the heuristic's rule for a layer was measured
# on a similar CPU, benchmark mode has little to find. Note that the articles' own test, which times 100 calls
# with `benchmark=True` and then 100 with `False` in one process, mixes the tuning into the first loop; the
# comparison above keeps the first call and the steady state apart.
#
# ## A small ResNet, layer by layer
#
# A network has many conv layers of different shapes, and each gets its own choice. CIFAR ResNet-20 at
# batch 32, its training batch (`autotune.models.resnet20`), run once with benchmark mode on through its own
# `Tuner`, and once with benchmark off. The deep 3x3 layers (more channels, smaller planes) are where
# Winograd's transforms may pay for themselves, so the choices can differ from layer to layer:

# %%
tuner = autotune.Tuner(benchmark=True)
model = models.resnet20(tuner=tuner)
xb = np.random.default_rng(2).standard_normal((32, 3, 32, 32), dtype=np.float32)
calls = profile.conv_calls(model, xb.shape)             # (layer name, ConvParams) of every conv call
profile.jit_warmup(dict.fromkeys(p for _, p in calls), "float32")
t = time.perf_counter(); model(xb); first_pass = time.perf_counter() - t
heuristic = autotune.Tuner(benchmark=False)
models.resnet20(tuner=heuristic)(xb)
tuned = {e.key.params: e for e in tuner.dispatch_table()}
guessed = {e.key.params: e.algo for e in heuristic.dispatch_table()}
print(f"first forward pass (tunes {len(tuned)} distinct conv shapes): {first_pass:.2f} s; "
      f"tuning {tuner.cache_info().tuning_seconds:.2f} s")
print(f"\n{'layer shape':<42}{'heuristic':>20}{'tuned':>20}   tied in the tuning")
for p, e in tuned.items():
    print(f"{str(p):<42}{guessed[p]:>20}{e.algo:>20}   {', '.join(e.tied) if len(e.tied) > 1 else '-'}")

# %% [markdown]
# ## What per-layer selection buys
#
# Every distinct conv shape of one forward pass is re-timed apart from the tuning (interleaved, 9 rounds,
# medians), with the tuned choice, the heuristic's, and every candidate the tuning measured within 2x of its
# best (the others cannot matter to the totals below). From these times we add up the conv time of the pass
# with the tuner's choices, with the heuristic's choices (benchmark off), with every layer forced to `direct`,
# and with the per-layer fastest of this re-measurement (the "oracle"). Per layer, the tuned choice is
# compared with the heuristic's by the tie rule, and where they disagree the tuning's own ratio is printed
# beside the re-timed one.

# %%
convs = dict(nn.conv_layers(model))
rng = np.random.default_rng(3)
count, medians, samples = {}, {}, {}
for name, p in calls:
    count[p] = count.get(p, 0) + 1
    if p in samples:
        continue
    c, x_ = convs[name], rng.standard_normal(p.in_shape, dtype=np.float32)
    e = tuned[p]
    near = {n for n, s in e.times.items() if s <= 2 * min(e.times.values())} | {e.algo, guessed[p], "direct"}
    runnable = {n: (lambda n=n, c=c, x_=x_: convalgos.conv2d(x_, c.weight, c.bias, c.stride, c.padding,
                                                                c.dilation, c.groups, algo=n))
                for n in near if convalgos.ALGORITHMS[n].supports(p)}
    samples[p] = measure.interleaved(runnable, rounds=9)
    medians[p] = {n: measure.median(s) for n, s in samples[p].items()}

outcomes = {}
print(f"{'layer shape':<42}{'tuned vs heuristic, re-timed':<66}{'heuristic / tuned, in the tuning'}")
for p in tuned:
    if tuned[p].algo == guessed[p]:
        outcomes[p], words, during = "same choice", f"same choice ({guessed[p]})", ""
    else:
        outcomes[p], words, _ = compare(samples[p], tuned[p].algo, guessed[p])
        e = tuned[p]
        during = (f"{e.times[guessed[p]] / e.times[e.algo]:.2f}x" if guessed[p] in e.times
                  else "heuristic's pick not timed")
    print(f"{str(p):<42}{words:<66}{during}")
print("\nper layer, benchmark mode against the heuristic:",
      {k: sum(v == k for v in outcomes.values()) for k in ("faster", "tie", "same choice", "slower")})

totals = {"autotuned": sum(count[p] * medians[p][tuned[p].algo] for p in tuned),
          "heuristic": sum(count[p] * medians[p][guessed[p]] for p in tuned),
          "direct everywhere": sum(count[p] * medians[p]["direct"] for p in tuned),
          "oracle": sum(count[p] * min(medians[p].values()) for p in tuned)}
choices = {"autotuned": {p: tuned[p].algo for p in tuned}, "heuristic": guessed,
           "direct everywhere": {p: "direct" for p in tuned},
           "oracle": {p: min(medians[p], key=medians[p].get) for p in tuned}}
assert all(totals["oracle"] <= t * (1 + 1e-12) for t in totals.values())   # the per-layer fastest bounds them
assert sum(outcomes[p] in ("faster", "tie", "same choice", "slower") for p in tuned) == len(tuned)
print(f"\n{len(calls)} conv calls of {len(tuned)} distinct shapes")
print(f"{'conv time of one pass':<24}{'ms':>9}{'/ autotuned':>13}")
for name, t_ in totals.items():
    print(f"{name:<24}{t_ * 1e3:>9.2f}{t_ / totals['autotuned']:>12.2f}x")

def total_noise(name):
    """The relative noise of a total: each layer's median noise (at least 1%), weighted by its time."""
    return np.sqrt(sum((count[p] * medians[p][a] * max(measure.noise(samples[p][a]), 0.01)) ** 2
                       for p, a in choices[name].items())) / totals[name]

def than(other):
    """The autotuned pass against another total, in words: a tie within the two totals' noise."""
    r = totals[other] / totals["autotuned"]
    band = 3 * np.hypot(total_noise("autotuned"), total_noise(other))
    if choices[other] == choices["autotuned"]:
        return f"the same as {other} (the same algorithm on every layer)"
    if abs(r - 1) <= band:
        return f"level with {other} ({r:.2f}x, within the noise of {band:.1%})"
    return f"{r:.2f}x faster than {other}" if r > 1 else f"{1 / r:.2f}x slower than {other}"

print(f"\nthe autotuned pass is {than('direct everywhere')}, {than('heuristic')} (benchmark off), and "
      f"{than('oracle')} (the per-layer fastest of this re-measurement)")
lost = {p: medians[p][tuned[p].algo] / medians[p][guessed[p]] for p in tuned if outcomes[p] == "slower"}
if lost:
    worst = max(lost, key=lost.get)
    e = tuned[worst]
    print(f"where benchmark mode lost most ({worst}): re-timed, {e.algo} takes {lost[worst]:.2f}x "
          f"{guessed[worst]}'s time, while the tuning measured "
          + (f"{guessed[worst]} at {e.times[guessed[worst]] / e.times[e.algo]:.2f}x {e.algo}'s"
             if guessed[worst] in e.times else f"no time for {guessed[worst]} ({e.skipped.get(guessed[worst], '?')})")
          + ": the tuning's runs measured what the re-timing does not (a disturbed run, or a margin within its noise)"
          + (f"; the table itself marked that choice provisional: {e.provisional}" if getattr(e, "provisional", "")
             else ""))

# %%
layers = list(tuned)
algos = [n for n in convalgos.ALGORITHMS if any(n in medians[p] for p in layers)]
fig, ax = plt.subplots(figsize=(11, 4.2))
width = 0.8 / len(algos)
for j, name in enumerate(algos):
    xs = np.array([i + (j - (len(algos) - 1) / 2) * width for i, p in enumerate(layers) if name in medians[p]])
    ratios = np.array([medians[p][name] / medians[p][tuned[p].algo] for p in layers if name in medians[p]])
    ax.vlines(xs, 1, ratios, color=f"C{j}", lw=2)                      # a stem from 1: its length is the ratio
    ax.plot(xs, ratios, "o", color=f"C{j}", label=name)
for i, p in enumerate(layers):
    at = lambda n: i + (algos.index(n) - (len(algos) - 1) / 2) * width
    star = ax.plot(at(tuned[p].algo), 1.0, "*", color=f"C{algos.index(tuned[p].algo)}", mec="k", markersize=14)[0]
    h = guessed[p]
    tri = ax.plot(at(h), medians[p][h] / medians[p][tuned[p].algo], "v", mfc="none", mec="r", mew=2, markersize=13)[0]
star.set_label("tuned choice, in its colour (1 by definition)"); tri.set_label("heuristic's choice")
ax.set_xticks(np.arange(len(layers)))
ax.set_xticklabels([f"{p.C}->{p.K}\n{p.H}x{p.W} {p.R}x{p.S}/{p.stride[0]}" for p in layers], fontsize=8)
ax.set_yscale("log"); ax.axhline(1, color="k", lw=0.5)
ticks = [t for t in (0.25, 0.5, 0.75, 1, 1.5, 2, 3, 4, 8, 16) if ax.get_ylim()[0] <= t <= ax.get_ylim()[1]]
ax.set_yticks(ticks, [f"{t:g}x" for t in ticks]); ax.minorticks_off()
ax.set_ylabel("re-timed median / tuned choice's (log)")
ax.set_xlabel("conv layer shape (channels in->out, output plane, kernel/stride), batch 32")
ax.set_title("ResNet-20: each candidate's re-timed time over the tuned choice's (below 1: faster than the tuned "
             "choice); those within 2x in the tuning, and direct", fontsize=9)
ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
plt.tight_layout(); plt.show()

# %% [markdown]
# How to read it: a point below 1 is an algorithm that ran faster in the re-measurement than the tuned choice;
# where the star and the triangle sit on different points, benchmark mode and the heuristic chose
# differently, and the triangle's height is what the heuristic's pick costs against the tuned one (above 1:
# the tuned choice was faster). Against one algorithm
# for every layer (what a library without selection runs), per-layer selection buys the ratio printed;
# against the heuristic it buys only what the heuristic gets wrong on this machine, which can be nothing. The
# distance from the oracle is what the tuner's own measurements, taken during one tuning, missed.
# `print(tuner.dispatch_table())` gives, per layer, every candidate's time and every exclusion's reason.
#
# Run `python -m autotune --model resnet18` (ResNet-18 at 224x224; a few minutes here) to see the full table
# with totals, or `python -m autotune --model vgg16 --plot vgg.png`.
#
# **What the race times on a GPU.** cuDNN's benchmark mode times each candidate's *GPU time*, between CUDA
# events, and nothing else. But an eager training step also pays the host's time to issue each call (Python,
# argument conversion, a kernel launch per step of the algorithm), and the host issues the next call while
# the GPU runs this one, so a call costs the larger of the two. Where the host is the bound, the candidate
# with fewer or cheaper launches makes the faster step even if its kernels are slower. The project's one
# hardware record, read here from `bench/results/gpu-h200.md` (stored measurements, not this machine's):

# %%
import pathlib, re
record = (pathlib.Path("..") / "bench" / "results" / "gpu-h200.md").read_text()
provenance = re.search(r"run from commit (\w+) on an (.+?) \(.*?\), (\d{4}-\d\d-\d\d \d\d:\d\d UTC)", record)
print(f"record: {provenance.group(2)}, commit {provenance.group(1)}, {provenance.group(3)}")
launches = re.findall(r"^\| (.+?) \| ([\d.]+) \| \d+ \|$", record, re.M)
for route, us in launches:
    print(f"   {float(us):6.1f} us per launch: {route}")
for line in re.findall(r"^- (resnet\d+ b32: benchmark mode's gain over the heuristic .*)$", record, re.M):
    print("  ", line)

# %% [markdown]
# Ranked by GPU time alone, benchmark mode chose the ResNet-20 step whose gain is printed above (below 1: a
# slower step than the heuristic's). So `autotune`'s race on a GPU measures both the host's and the GPU's
# time per candidate and minimises the larger; a step replayed as a CUDA graph (`autotune.cuda_graph(step)`)
# has issued its launches once, at capture, so there it minimises GPU time alone. The GPU lesson of this
# course takes this further.

# %%
print(f"this notebook ran in {time.perf_counter() - started:.0f} s")
