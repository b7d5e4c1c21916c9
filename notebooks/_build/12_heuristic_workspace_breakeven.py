# %% [markdown]
# # 12. The heuristic opened, what tuning buys and costs, and the workspace it may use
#
# With benchmark mode off, `autotune` (like cuDNN) picks an algorithm without timing anything: a heuristic
# ranks the candidates. With it on, it times them all once per key and keeps the fastest. This notebook opens
# the heuristic and prices both choices on this machine:
#
# 1. **the heuristic's rules**: what `autotune/heuristics.json` holds and where it was measured;
# 2. **its regret** against benchmark mode, per key of a ResNet-20 training step, and how it compares with
#    cuDNN's heuristic modes;
# 3. **tuning's break-even**: after how many training steps the tuning has paid for itself, per net;
# 4. **`workspace_limit`**: what each limit makes the tuner choose, and what the choice costs.

# %%
import collections, json, os, time
import machine      # notebooks/machine.py: the header every notebook prints
machine.describe()
import autotune, convalgos    # first: it sets the thread variables that numpy's OpenBLAS reads when it loads
import numpy as np
import matplotlib.pyplot as plt
from convalgos import ALGORITHMS, ConvParams
from autotune import measure, models, nn, optim
from autotune.heuristics import Heuristics
from autotune.profile import conv_calls

rng = np.random.default_rng(0)

# %% [markdown]
# ## 1. The rules, and where they were measured
#
# `python -m bench.heuristics` times every algorithm on a few layers of each layer class (3x3 stride 1 on
# narrow or wide channels, 1x1, strided, large kernels, dilated, depthwise) and writes, per device and pass,
# one rule per class: the algorithms from fastest to slowest, with each one's score (its time over the best,
# a geometric mean over the class's layers). The first rule whose `when` holds fires. Each rule also keeps each
# algorithm's **closest** approach to the best (its smallest time over the best on any of the class's layers):
# benchmark mode does not even run one that never came within `prune_ratio` (2x) of the best there, since a
# mean can hide the one layer an algorithm won, a minimum cannot. On a layer near one of the class's layers
# (within 2 octaves of its GEMM's sizes: output pixels, input and output channels) it prunes by that layer's
# own measurement instead (section 1b). The file says where and when it was measured:

# %%
data = json.load(open("../autotune/heuristics.json"))
print(f"measured: {data['measured']}, by `{data['produced_by']}`")
print("machine:  " + ", ".join(f"{k} {v}" for k, v in data["machine"].items()))
print(f"score:    {data['score']}")
this_cpu = machine.cpu()
recorded = [k for k in ("cpu", "vendor", "family", "model", "cores") if k in data["machine"]]
print(f"this machine: {this_cpu.get('name')} ({this_cpu.get('vendor')}, family {this_cpu.get('family')} model "
      f"{this_cpu.get('model')}), {len(os.sched_getaffinity(0))} cores; of its machine the file records: "
      f"{', '.join(recorded)}; the same CPU name as here: {data['machine'].get('cpu') == this_cpu.get('name')}")
rules = data["devices"]["cpu"]
prune = autotune.Tuner().prune_ratio                 # the tuner's default: what benchmark mode does not even run
for op in ("forward", "backward_data", "backward_filter"):
    print(f"\n{op}: {len(rules[op])} rules, first match wins")
    for rule in rules[op]:
        top = ", ".join(f"{n} {rule['score'][n]:.2f}" for n in rule["order"][:3])
        pruned = [n for n in rule["order"] if rule["closest"][n] >= prune]
        print(f"  {rule['name']:<24} when {json.dumps(rule['when']):<70} -> {top}, ...; never within {prune:g}x: "
              f"{', '.join(pruned) or 'none'}")
print(f"\npasses with rules of their own: {list(rules)}; devices: {list(data['devices'])} (the GPU ranks by "
      f"FLOPs and workspace from a datasheet seed: {list(data.get('seeds', {}))})")

# %% [markdown]
# ### 1b. A class spans unlike layers: prune by the ones near
#
# The "3x3 stride 1, wide" class holds layers of 64 channels on 56 px and of 512 on 7 px, at batch 1. An
# algorithm that came within 2x of the best on one of them is raced on every 3x3 layer of 64 channels or more,
# even where it is far behind. The file keeps each class layer's own ratios and its GEMM's sizes (`at`), and the
# tuner prunes by the class layers near the layer it tunes, where there are any. ResNet-20's last stage (64
# channels, 8 px, batch 32: 2048 output pixels) is near the class's 56 px layer (3136) and far from the others:

# %%
from autotune.heuristics import gemm_sizes

heuristics = Heuristics(data)
resnet20_stage3 = ConvParams.from_shapes((32, 64, 8, 8), (64, 64, 3, 3), padding=1)
names = [n for n, a in ALGORITHMS.items() if a.supports(resnet20_stage3, "forward")]
flops = {n: ALGORITHMS[n].flops(resnet20_stage3, "forward") for n in names}
ranked, rule_name = heuristics.rank(resnet20_stage3, names, flops=flops)
near = heuristics.near_layers(rule_name, resnet20_stage3)
by_class = heuristics.slowdowns(rule_name, ranked)
by_near = heuristics.slowdowns(rule_name, ranked, p=resnet20_stage3)
print(f"rule {rule_name!r}; this layer's GEMM sizes {gemm_sizes(resnet20_stage3)}; the class's layers "
      f"{[one['at'] for one in heuristics.rule_named(rule_name)['layers']]}; near it: "
      f"{[one['at'] for one in near]}")
for n in ranked:
    fate = "raced" if by_near[n] < prune else ("pruned (raced by the class alone)" if by_class[n] < prune else "pruned")
    print(f"  {n:<20} closest on the class {by_class[n]:5.2f}x  on the near layer(s) {by_near[n]:5.2f}x  {fate}")
print(f"raced: {sum(by_near[n] < prune for n in ranked)} of {len(ranked)} by the near layer(s), "
      f"{sum(by_class[n] < prune for n in ranked)} by the class alone")

# %% [markdown]
# ## 2. Its regret, on one ResNet-20 training step
#
# Two ResNet-20s (batch 4, 32x32, the same weights) run one training step each: one through a tuner with
# benchmark mode on, one with it off. Every conv pass is a key (pass, layer shape, dtype, threads). The
# benchmark tuner's race timed every candidate of every key, the heuristic's pick among them, so the **regret**
# of the heuristic on a key is the race's time of the heuristic's pick over the race's time of its choice:
# the tuner's own numbers, taken in the same interleaved rounds.

# %%
def train_step_of(net):
    opt, loss_fn = optim.SGD(net, lr=0.05, momentum=0.9), nn.CrossEntropyLoss()

    def train_step(x, labels):
        loss = loss_fn(net(x), labels)
        net.zero_grad()
        net.backward(loss_fn.backward())
        opt.step()
        return loss
    return train_step

def tune_net(name, x, labels):
    """The benchmark tuner and the heuristic tuner after one training step each, the first step's seconds, and
    the calls per step of every layer shape (one per conv layer of that shape, in each pass it runs)."""
    out = {"calls": collections.Counter(p for _, p in conv_calls(getattr(models, name)(seed=0), x.shape))}
    for mode, benchmark in (("benchmark", True), ("heuristic", False)):
        tuner = autotune.Tuner(benchmark=benchmark)
        step = train_step_of(getattr(models, name)(seed=0, tuner=tuner).train())
        start = time.perf_counter()
        step(x, labels)
        out[mode] = {"tuner": tuner, "step": step, "first step": time.perf_counter() - start}
    return out

x20 = rng.standard_normal((4, 3, 32, 32)).astype(np.float32)
labels20 = rng.integers(0, 10, len(x20))
r20 = tune_net("resnet20", x20, labels20)

def regret_rows(run):
    """Per key: its calls per step, the choice, the heuristic's pick, their race times, direct's race time."""
    picks = {e.key: e.algo for e in run["heuristic"]["tuner"].dispatch_table()}
    rows = []
    for e in run["benchmark"]["tuner"].dispatch_table():
        rows.append({"key": e.key, "calls": run["calls"][e.key.params], "choice": e.algo, "t": e.times[e.algo],
                     "pick": picks[e.key], "t pick": e.times.get(picks[e.key]), "t direct": e.times.get("direct"),
                     "tuning": e.tuning_seconds})
    return rows

rows20 = regret_rows(r20)
print(f"{'pass':<16}{'layer':<42}{'calls':>6}{'benchmark chose':>20}{'ms':>8}{'heuristic picked':>20}{'ms':>8}"
      f"{'regret':>8}")
for r in sorted(rows20, key=lambda r: (r["key"].op, str(r["key"].params))):
    regret = r["t pick"] / r["t"] if r["t pick"] else float("nan")
    print(f"{r['key'].op:<16}{str(r['key'].params):<42}{r['calls']:>6}{r['choice']:>20}{r['t'] * 1e3:>8.2f}"
          f"{r['pick']:>20}{(r['t pick'] or float('nan')) * 1e3:>8.2f}{regret:>8.2f}")

# %%
timed = [r for r in rows20 if r["t pick"]]
agree = sum(r["pick"] == r["choice"] for r in rows20)
step_choice = sum(r["calls"] * r["t"] for r in timed)
step_pick = sum(r["calls"] * r["t pick"] for r in timed)
worst = max(timed, key=lambda r: r["t pick"] / r["t"])
print(f"the heuristic picked what benchmark mode chose on {agree} of {len(rows20)} keys; over one step's conv "
      f"passes (each key's time x its calls) its picks add up to {step_pick * 1e3:.1f} ms against "
      f"{step_choice * 1e3:.1f} ms, a regret of {step_pick / step_choice:.2f}x; its worst key: {worst['key'].op} "
      f"{worst['key'].params} ({worst['pick']} {worst['t pick'] / worst['t']:.1f}x {worst['choice']}'s time)")
assert agree < len(rows20) and step_pick / step_choice > 1.0

h = autotune.Tuner().heuristics
p0 = worst["key"].params
names = [n for n, a in ALGORITHMS.items() if a.supports(p0, worst["key"].op)]
flops = {n: ALGORITHMS[n].flops(p0, worst["key"].op) for n in names}
space = {n: ALGORITHMS[n].workspace_bytes(p0, worst["key"].op) for n in names}
rank_s = measure.median(measure.interleaved(
    {"rank": lambda: h.rank(p0, names, op=worst["key"].op, flops=flops, workspace=space)}, rounds=200)["rank"])
tune_s = np.median([r["tuning"] for r in rows20])
print(f"the heuristic's cost: {rank_s * 1e6:.0f} us to rank a key's candidates, against a median of {tune_s:.2f} s to "
      f"tune one ({tune_s / rank_s:,.0f}x)")
assert rank_s < 0.01 * tune_s

# %% [markdown]
# **cuDNN's heuristic modes, beside these.** cuDNN's legacy API has two ways to choose:
# `cudnnGetConvolutionForwardAlgorithm_v7` "serves as a heuristic for obtaining the best suited algorithm ...
# for the given layer specifications", returning all algorithms "sorted by expected (based on internal
# heuristic) relative performance", while `cudnnFindConvolutionForwardAlgorithm` runs them all and sorts them
# by measured time (cuDNN API reference, the `cudnn_cnn` library; `torch.backends.cudnn.benchmark` chooses
# between the two ways). Its graph API names three **heuristic modes** (cuDNN 9 documentation, the graph API's
# section "Heuristics"):
#
# - **mode A**, "intended to be fast and be able to handle most operation graph patterns", returning engine
#   configurations "ranked by the expected performance";
# - **mode B**, "intended to be more generally accurate than mode A, but with the tradeoff of higher CPU
#   latency to return the list of engine configs", which "may fall back to the mode A heuristic in cases where
#   we know mode A can do better";
# - **fallback**, "intended to be fast and provide functional fallbacks without expectation of optimal
#   performance";
#
# and recommends querying mode A or B, then optionally "auto-tuning": timing each configuration on the
# device. Here: `heuristics.json`'s rules play mode A's part (a lookup measured offline, the microseconds
# printed above); benchmark mode is the auto-tuning; the ranking by FLOPs where a device or pass has no rules
# is the fallback (a working order, no performance model behind it). Nothing here plays mode B: a costlier,
# better model of the layer would sit between the two, and the regret above is what it could win back.
#
# ## 3. Tuning's break-even, per net
#
# Tuning costs seconds once; it saves time on every later step. With T the seconds the tuner spent
# (`cache_info().tuning_seconds`), and for every key k its calls per step n_k, the race's time of the choice
# t_k and of the alternative a_k (the heuristic's pick, or `direct` forced everywhere):
#
#     saving per step S = Σ_k n_k (a_k - t_k),        break-even N* = T / S steps
#
# Below N* steps, benchmark mode has cost more than it saved; past it, it pays. Computed here for ResNet-20
# (from the tables above) and LeNet-5 (batch 16, 1x32x32 inputs), in steps: (a) the tuning seconds,
# (b) the saving per step, (c) their quotient; then drawn: the cumulative seconds of the conv passes with
# benchmark mode (it starts at T) and without (it starts at 0 and climbs faster), crossing at N*.

# %%
x5 = rng.standard_normal((16, 1, 32, 32)).astype(np.float32)
labels5 = rng.integers(0, 10, len(x5))
runs = {"resnet20 b4": (r20, rows20), "lenet5 b16": None}
r5 = tune_net("lenet5", x5, labels5)
runs["lenet5 b16"] = (r5, regret_rows(r5))

breakeven = {}
for net, (run, rows) in runs.items():
    info = run["benchmark"]["tuner"].cache_info()
    saving = {"vs the heuristic": sum(r["calls"] * (r["t pick"] - r["t"]) for r in rows if r["t pick"]),
              "vs forced direct": sum(r["calls"] * (r["t direct"] - r["t"]) for r in rows if r["t direct"])}
    step_s = sum(r["calls"] * r["t"] for r in rows)
    print(f"{net}: (a) {info.tuning_seconds:.2f} s of tuning over {info.entries} keys (its first step took "
          f"{run['benchmark']['first step']:.2f} s, the heuristic's {run['heuristic']['first step']:.2f} s); the "
          f"chosen conv passes add up to {step_s * 1e3:.1f} ms a step")
    for against, s in saving.items():
        steps = info.tuning_seconds / s if s > 0 else float("inf")
        breakeven[net, against] = (steps, s, info.tuning_seconds)
        print(f"   {against}: (b) saves {s * 1e3:.2f} ms a step; (c) break-even N* = {info.tuning_seconds:.2f} s / "
              + (f"{s * 1e3:.2f} ms = {steps:,.0f} steps" if s > 0 else "nothing saved: never pays"))
    breakeven[net, "step"] = step_s

# %%
fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
for ax, net in zip(axes, runs):
    tuning, step_s = breakeven[net, "vs the heuristic"][2], breakeven[net, "step"]
    finite = [breakeven[net, a][0] for a in ("vs the heuristic", "vs forced direct") if breakeven[net, a][1] > 0]
    n = np.linspace(0, 2 * max(finite, default=1000), 200)
    ax.plot(n, tuning + n * step_s, lw=2.5, zorder=3, label="benchmark mode: tuning, then its choices")
    for against, color, style in (("vs the heuristic", "C1", "--"), ("vs forced direct", "C2", "-.")):
        steps, saving, _ = breakeven[net, against]
        ax.plot(n, n * (step_s + saving), style, color=color, zorder=4, label=f"no tuning: {against[3:]}")
        if saving > 0:
            ax.axvline(steps, color=color, ls=":", lw=1)
            ax.annotate(f"N* = {steps:,.0f}", (steps, tuning + steps * step_s), xytext=(5, -14 if color == "C1" else 6),
                        textcoords="offset points", fontsize=8, color=color)
    ax.set_xlabel("training steps"); ax.set_ylabel("conv passes' seconds, cumulative (s)")
    ax.set_title(f"{net}: {tuning:.2f} s of tuning", fontsize=10); ax.grid(alpha=0.3)
axes[0].legend(fontsize=8, loc="upper left")
plt.show()

# %% [markdown]
# Do the race's times predict the step? The race times each pass alone, back to back, with its inputs warm in
# the caches; a training step runs the passes between other layers. The three ResNet-20s (the tuned table, the
# heuristic's, and one forced to `direct` everywhere by a one-rule heuristic) run whole steps, interleaved:

# %%
direct_tuner = autotune.Tuner(heuristics=Heuristics({"rules": [{"name": "direct only", "when": {},
                                                                   "order": ["direct"]}]}))
forced = train_step_of(models.resnet20(seed=0, tuner=direct_tuner).train())
steps20 = {"benchmark": r20["benchmark"]["step"], "heuristic": r20["heuristic"]["step"], "forced direct": forced}
samples = measure.interleaved({k: (lambda f=f: f(x20, labels20)) for k, f in steps20.items()}, rounds=5)
measured = {k: measure.median(s) for k, s in samples.items()}
for against, mode in (("vs the heuristic", "heuristic"), ("vs forced direct", "forced direct")):
    steps, predicted, tuning = breakeven["resnet20 b4", against]
    saved = measured[mode] - measured["benchmark"]
    band = 3 * 1.86 * np.hypot(measure.noise(samples[mode]) * measured[mode],
                                measure.noise(samples["benchmark"]) * measured["benchmark"])
    print(f"ResNet-20 step, {against}: measured {measured[mode] * 1e3:.1f} ms against the tuned table's "
          f"{measured['benchmark'] * 1e3:.1f} ms, a saving of {saved * 1e3:.1f} ms ± {band * 1e3:.1f} ms (3 standard "
          f"errors of the difference of medians, notebook 3) against {predicted * 1e3:.1f} ms predicted from the race"
          + ("; within the noise" if abs(saved) < band else ""))
steps_direct, saving_direct, tuning20 = breakeven["resnet20 b4", "vs forced direct"]
CIFAR10_TRAIN = 50_000      # images in CIFAR-10's training set (Krizhevsky, 2009), ResNet-20's data set
print(f"\nResNet-20's tuning ({tuning20:.1f} s) pays for itself against forced direct after {steps_direct:,.0f} steps "
      f"by the race's numbers: an epoch of CIFAR-10 at batch {len(x20)} is {CIFAR10_TRAIN // len(x20):,} steps")
assert saving_direct > 0 and tuning20 > saving_direct

# %% [markdown]
# Reading it: the break-even is a quotient of two measured numbers, and both move. T grows with the number of
# distinct keys (a net whose shapes change re-tunes: notebook 4), S with how wrong the alternative is. A small
# net on small batches, where every pass takes a fraction of a millisecond, saves little per step and may never
# pay within a short run; a long training run of a net whose heuristic picks are poor pays quickly. The race's
# per-pass times and the whole step can disagree (the printout above says by how much): the passes run colder
# inside a step than back to back in a race.
#
# ## 4. `workspace_limit`: what the tuner may use, and what it costs
#
# Many algorithms need scratch memory beside their operands: the patch matrix of im2col, Winograd's transformed
# tiles, FFT's spectra, direct's padded copy. Two forward layers: a 3x3 on 64 channels and a ResNet's 7x7
# stride-2 stem. `workspace_limit` (bytes; cuDNN's `workspace` argument, or the
# memory limit of its Get-algorithm calls) excludes the candidates that need more. Sweeping it as a staircase:
# start unlimited, then set the limit just under the current choice's workspace, so that each step takes the
# choice away, until a zero-workspace algorithm is left (`implicit_gemm` reads x in place). Each limit is a
# fresh tuning on the same layer; then all the choices are timed together, interleaved, so that their times are
# comparable.

# %%
def staircase(call):
    """[(limit, chosen algorithm, its workspace bytes)] from no limit down to a zero-workspace choice."""
    steps, limit = [], None
    while True:
        tuner = autotune.Tuner(benchmark=True, workspace_limit=limit, prune_ratio=None)    # every step timed
        call(tuner)
        (entry,) = tuner.dispatch_table()
        steps.append((limit, entry.algo, entry.workspace[entry.algo]))
        if entry.workspace[entry.algo] == 0:
            return steps
        limit = entry.workspace[entry.algo] - 1

LAYERS = {"3x3, 2x64x28x28 -> 64": ("forward", (2, 64, 28, 28), (64, 64, 3, 3), 1, 1),
          "7x7 stride 2, 2x3x112x112 -> 64": ("forward", (2, 3, 112, 112), (64, 3, 7, 7), 2, 3)}
sweeps = {}
for label, (op, x_shape, w_shape, stride, pad) in LAYERS.items():
    x = rng.standard_normal(x_shape, dtype=np.float32)
    w = rng.standard_normal(w_shape, dtype=np.float32) / np.float32(np.sqrt(np.prod(w_shape[1:])))
    p = ConvParams.from_arrays(x, w, stride=stride, padding=pad)
    steps = staircase(lambda t, x=x, w=w, s=stride, q=pad: t.conv2d(x, w, stride=s, padding=q))
    y = np.empty(p.out_shape, np.float32)
    times = {n: measure.median(s) for n, s in measure.interleaved(
        {n: (lambda n=n: convalgos.run(ALGORITHMS[n], op, x, w, p, y)) for _, n, _ in steps}, rounds=7).items()}
    sweeps[label] = (steps, times)
    print(label)
    for limit, algo, space in steps:
        print(f"   workspace_limit {'none' if limit is None else f'{limit / 2**20:.3f} MiB':>12}: {algo:<20} needs "
              f"{space / 2**20:6.3f} MiB, runs in {times[algo] * 1e3:6.2f} ms "
              f"({times[algo] / times[steps[0][1]]:.2f}x the unlimited choice)")

# %%
fig, ax = plt.subplots(figsize=(8, 4))
for j, (label, (steps, times)) in enumerate(sweeps.items()):
    spaces = [max(space, 2**10) / 2**20 for _, _, space in steps]
    ax.plot(spaces, [times[a] / times[steps[0][1]] for _, a, _ in steps], "o-", label=label)
    for (_, algo, _), s in zip(steps, spaces):          # names below the first layer's points, above the second's
        ax.annotate(algo, (s, times[algo] / times[steps[0][1]]), fontsize=7, xytext=(4, 7 if j else -11),
                    textcoords="offset points", color=f"C{j}")
ax.set_xscale("log"); ax.set_yscale("log"); ax.invert_xaxis(); ax.margins(x=0.12, y=0.15)
ax.set_xlabel("workspace of the choice (MiB, log; zero drawn at 1 KiB) - the limit tightens to the right")
ax.set_ylabel("time / the unlimited choice's time (log)")
ax.set_title("workspace_limit as a staircase: each step takes the previous choice away")
ax.legend(fontsize=8, loc="upper left"); ax.grid(alpha=0.3, which="both")
plt.show()

held = all(limit is None or space <= limit for steps, _ in sweeps.values() for limit, _, space in steps)
costs = {label: times[steps[-1][1]] / times[steps[0][1]] for label, (steps, times) in sweeps.items()}
print(f"every choice fits its limit: {held}; taking all workspace away costs "
      + ", ".join(f"{c:.2f}x on the {label} layer ({sweeps[label][0][-1][1]})" for label, c in costs.items()))
assert held and all(steps[-1][2] == 0 for steps, _ in sweeps.values())
assert max(costs.values()) > 2

# %% [markdown]
# A limit never fails a call that some algorithm could serve (`workspace_limit=0` still runs, through
# `implicit_gemm`), and it cannot make the choice faster: each step of the staircase chooses among fewer
# candidates (a step that measures faster than the one before it is the noise of a race between near-ties).
# What each step costs depends on the layer and is printed above. The last one, to `implicit_gemm`, which reads x
# in place with per-tap bounds instead of from a padded copy, costs over 2x on at least one of the two layers
# (checked). On a GPU the trade is the same, with the workspace coming out of the device memory
# the model and its activations need (`convalgos.workspace_cap` is a quarter of it by default).