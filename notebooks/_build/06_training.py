# %% [markdown]
# # 6. Training: three passes per layer, each tuned on its own
#
# A training step runs three convolutions per layer: the forward pass, the input's gradient
# (`backward_data`) and the weight's gradient (`backward_filter`). `torch.backends.cudnn.benchmark` tunes
# each of them under its own key, and so does `autotune`: the best algorithm for a layer can differ between
# its passes, because their shapes differ (backward-filter's "kernel" is a whole plane of dy). The articles'
# claim about training: benchmark mode makes it faster, **when the shapes stay fixed**.
#
# Here LeNet-5 (`autotune.models.lenet5`) trains on scikit-learn's digits (`autotune.data.load_digits`:
# 1,797 images of 8x8, resized to 32x32 by bilinear interpolation, 20% held out), batch 64, three times:
#
# 1. benchmark **off** (the heuristic picks, nothing is timed);
# 2. benchmark **on**, the last short batch of each epoch dropped (one batch shape: `drop_last=True` in a
#    torch DataLoader);
# 3. benchmark **on** with the last short batch kept (two batch shapes, the classic case of a changing
#    shape).
#
# Every conclusion printed is computed from the numbers beside it; they describe this machine and this run.

# %%
import time
import machine      # notebooks/machine.py: the header every notebook prints
machine.describe()
import autotune, convalgos    # first: it sets the thread variables that numpy's OpenBLAS reads when it loads
import numpy as np
import matplotlib.pyplot as plt
from autotune import data, measure, models, nn, optim, profile

x_train, y_train, x_test, y_test = data.load_digits()
BATCH, EPOCHS = 64, 2
short = len(x_train) % BATCH
print(f"training images {x_train.shape}, held out {x_test.shape}; {len(x_train) // BATCH} batches of {BATCH} "
      f"and a last one of {short} per epoch")

# %% [markdown]
# Numba compiles each kernel on its first call (and caches it on disk for the next process): that is a cost
# of this library, not of benchmark mode, so every algorithm runs each pass it supports once on a small batch
# of each conv layer first.

# %%
start = time.perf_counter()
rng = np.random.default_rng(0)
net = models.lenet5()
convs = dict(nn.conv_layers(net))
for name, p in profile.conv_calls(net, (2,) + net.input_shape):          # (layer name, ConvParams) of each conv
    conv = convs[name]
    layer = dict(stride=conv.stride, padding=conv.padding, dilation=conv.dilation, groups=conv.groups)
    x_small = rng.standard_normal(p.in_shape, dtype=np.float32)
    dy = rng.standard_normal(p.out_shape, dtype=np.float32)
    for algo, a in convalgos.ALGORITHMS.items():
        if a.supports(p, "forward"):
            convalgos.conv2d(x_small, conv.weight, algo=algo, **layer)
        if a.supports(p, "backward_data"):
            convalgos.conv2d_input(x_small.shape, conv.weight, dy, algo=algo, **layer)
        if a.supports(p, "backward_filter"):
            convalgos.conv2d_weight(x_small, conv.weight.shape, dy, algo=algo, **layer)
print(f"compiled / loaded every kernel of every pass in {time.perf_counter() - start:.1f} s")

# %% [markdown]
# ## The training loop
#
# The API follows torch's: `net.train()`, a loss, `net.backward(loss_fn.backward())`, `opt.step()`. Every
# conv pass goes through the run's own `Tuner`. Each step is timed; the held-out accuracy is measured at the
# end, with benchmark mode off (evaluation meets its batch shapes once: tuning them would cost more than it
# saves).

# %%
def train(tuner, drop_last):
    """Train a fresh LeNet-5 (same seed every run) for EPOCHS; (step seconds, batch sizes, model)."""
    net = models.lenet5(seed=0, tuner=tuner).train()
    opt = optim.SGD(net, lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    order_rng = np.random.default_rng(1)                       # the same batches in every run
    seconds, sizes = [], []
    for epoch in range(EPOCHS):
        order = order_rng.permutation(len(x_train))
        batches = [order[i:i + BATCH] for i in range(0, len(order), BATCH)]
        if drop_last and len(batches[-1]) < BATCH:
            batches = batches[:-1]
        for idx in batches:
            start = time.perf_counter()
            loss = loss_fn(net(x_train[idx]), y_train[idx])
            net.zero_grad()
            net.backward(loss_fn.backward())
            opt.step()
            seconds.append(time.perf_counter() - start)
            sizes.append(len(idx))
    return np.array(seconds), np.array(sizes), net

def accuracy(tuner, net):
    net.eval()
    with tuner.flags(benchmark=False):
        right = sum(int((np.argmax(net(x_test[i:i + BATCH]), axis=1) == y_test[i:i + BATCH]).sum())
                    for i in range(0, len(x_test), BATCH))
    net.train()
    return right / len(x_test)

runs = {"benchmark off": (autotune.Tuner(benchmark=False), False),
        "benchmark on, last batch dropped": (autotune.Tuner(benchmark=True), True),
        "benchmark on, last batch kept": (autotune.Tuner(benchmark=True), False)}
results = {}
for label, (tuner, drop_last) in runs.items():
    seconds, sizes, net = train(tuner, drop_last)
    results[label] = dict(seconds=seconds, sizes=sizes, net=net, tuner=tuner, accuracy=accuracy(tuner, net))
    info = tuner.cache_info()
    print(f"{label:<34} {len(seconds)} steps in {seconds.sum():6.2f} s, tuning {info.tuning_seconds:5.2f} s "
          f"({info.misses} keys), held-out accuracy {results[label]['accuracy']:.1%}")

# %%
fig, ax = plt.subplots(figsize=(9, 4))
for label, r in results.items():
    ax.plot(np.arange(1, len(r["seconds"]) + 1), r["seconds"] * 1e3, marker=".", lw=1, label=label)
    shorts = np.flatnonzero(r["sizes"] < BATCH)
    ax.plot(shorts + 1, r["seconds"][shorts] * 1e3, "ko", mfc="none", markersize=9)
ax.set_yscale("log"); ax.set_xlabel("training step"); ax.set_ylabel("time per step (ms, log)")
ax.set_title(f"LeNet-5 on digits, batch {BATCH}, {EPOCHS} epochs (circles: the short last batch of an epoch)")
ax.legend(fontsize=8)
plt.show()

steady = {}
for label, r in results.items():
    s, full = r["seconds"], r["sizes"] == BATCH
    steady[label] = np.median(s[1:][full[1:]])             # steps after the first, full batches
    line = f"{label:<34} step 1: {s[0] * 1e3:7.0f} ms, steady step (median): {steady[label] * 1e3:6.1f} ms"
    shorts = np.flatnonzero(~full)
    if len(shorts):
        line += ", short batches: " + ", ".join(f"step {i + 1} {s[i] * 1e3:.0f} ms" for i in shorts)
    print(line)

kept = results["benchmark on, last batch kept"]
misses = {label: results[label]["tuner"].cache_info().misses for label in results if "benchmark on" in label}
assert misses["benchmark on, last batch kept"] > misses["benchmark on, last batch dropped"]   # the short batch: new keys
first_short, later_short = np.flatnonzero(kept["sizes"] < BATCH)[[0, -1]]
ratio = kept["seconds"][first_short] / steady["benchmark on, last batch kept"]
print(f"\nwith the last batch kept, the first short batch (a new shape: every pass of every layer tuned again) "
      f"took {ratio:.0f}x a steady step;"
      + (f" the next epoch's short batch, a hit, took "
         f"{kept['seconds'][later_short] / steady['benchmark on, last batch kept']:.1f}x" if later_short != first_short
         else ""))

# %% [markdown]
# ## Steady state: what the tuned choices buy
#
# The steps above ran one after the other, while the machine's speed drifts. To compare the steady steps
# fairly, one training step of each trained network (its table is full, so every call is a hit) is re-timed
# in interleaved rounds, on the same batch of 64, and compared by the tuner's tie rule (medians within the
# measured noise, at least 1%, are a tie):

# %%
xb, yb = x_train[:BATCH], y_train[:BATCH]
def one_step(net):
    loss_fn = nn.CrossEntropyLoss()
    def step():                                               # a training step without the update
        loss_fn(net(xb), yb)
        net.zero_grad()
        net.backward(loss_fn.backward())
    return step

steps = {label: one_step(r["net"]) for label, r in results.items() if "kept" not in label}
samples = measure.interleaved(steps, rounds=15)
off_s, on_s = samples["benchmark off"], samples["benchmark on, last batch dropped"]
m_off, m_on = measure.median(off_s), measure.median(on_s)
tied = len(measure.tied_with_fastest(samples, tie_tolerance=0.01)) == 2
print(f"steady step: benchmark off {m_off * 1e3:.1f} ms, benchmark on {m_on * 1e3:.1f} ms "
      f"(noise {measure.noise(off_s):.1%} and {measure.noise(on_s):.1%})")
tuning = results["benchmark on, last batch dropped"]["tuner"].cache_info().tuning_seconds
if tied:
    print(f"a tie within the noise: on this machine the tuned choices run no faster than the heuristic's, and "
          f"benchmark mode's {tuning:.1f} s of tuning are not paid back")
elif m_on < m_off:
    print(f"benchmark on is {m_off / m_on:.2f}x faster per step: its {tuning:.1f} s of tuning are paid back "
          f"after about {tuning / (m_off - m_on):.0f} steps ({tuning / (m_off - m_on) / (len(x_train) // BATCH):.1f} "
          f"epochs of {len(x_train) // BATCH} steps)")
else:
    print(f"benchmark on is {m_on / m_off:.2f}x slower per step than the heuristic's choices: its choices, made "
          f"from timings during one tuning, do not hold in this re-measurement, and the {tuning:.1f} s of "
          f"tuning are lost")

# %% [markdown]
# What did the heuristic run instead? Both tables hold one entry per (layer, pass) at batch 64: benchmark
# off's holds the heuristic's pick, benchmark on's the tuned pick and the time the tuning measured for every
# candidate, the heuristic's pick included. Where they differ, the last column is the heuristic's pick's
# median over the tuned pick's, both from that one tuning:

# %%
def training_keys(tuner):
    """(weight shape, pass) -> entry, for the training step's keys at batch 64 (eval has its own)."""
    return {(e.key.params.weight_shape, e.key.op): e for e in tuner.dispatch_table()
            if e.key.params.N == BATCH and not e.key.prepared}

guess = training_keys(results["benchmark off"]["tuner"])
tuned_keys = training_keys(results["benchmark on, last batch dropped"]["tuner"])
layer_of = {conv.weight.shape: name for name, conv in nn.conv_layers(results["benchmark off"]["net"])}
print(f"{'layer':<7}{'pass':<17}{'heuristic':>20}{'tuned':>20}{'heuristic / tuned (tuning medians)':>38}")
slower = {}
for (shape, op), e in tuned_keys.items():
    h = guess[(shape, op)].algo
    ratio = e.times[h] / e.times[e.algo] if h in e.times else float("nan")
    cell = "same pick" if h == e.algo else (f"{ratio:.2f}x" if h in e.times else "not timed: " + e.skipped.get(h, "?"))
    if h != e.algo:
        slower[(layer_of[shape], op)] = ratio
    print(f"{layer_of[shape]:<7}{op:<17}{h:>20}{e.algo:>20}{cell:>38}")
print(f"\nthe heuristic picked differently on {len(slower)} of {len(tuned_keys)} (layer, pass) keys"
      + (f"; there the tuning measured its pick {min(slower.values()):.1f}-{max(slower.values()):.1f}x slower"
         if slower else ""))

# %% [markdown]
# ## One layer, three passes, different choices?
#
# The table of the fixed-shape run holds one entry per (layer, pass) at batch 64. `entry.key.op` names the
# pass; `entry.times` the median time of every candidate the tuning timed for that pass.

# %%
by_layer = {}                                               # layer -> pass -> entry, passes in training order
for (shape, op), e in sorted(tuned_keys.items(), key=lambda kv: convalgos.PASSES.index(kv[0][1])):
    by_layer.setdefault(layer_of[shape], {})[op] = e
print(f"LeNet-5, batch {BATCH}\n{'layer':<8}" + "".join(f"{op:>20}" for op in convalgos.PASSES))
for name, entries in by_layer.items():
    print(f"{name:<8}" + "".join(f"{entries[op].algo if op in entries else '(not run)':>20}"
                                 for op in convalgos.PASSES))
skipped = [name for name, entries in by_layer.items() if "backward_data" not in entries]
if skipped:
    print(f"\n{', '.join(skipped)}: no input gradient computed (nothing upstream needs it; torch skips it too)")
distinct = {name: len({e.algo for e in entries.values()}) for name, entries in by_layer.items()}
print("distinct algorithms over each layer's passes:", distinct)

# %% [markdown]
# LeNet's layers are small and narrow (1 and 6 input channels, 5x5 kernels), where the direct sum's register
# blocks have little competition; if one algorithm won every pass above, that is this machine's answer for
# them, not a rule. The passes disagree where their shapes give the algorithms different work: a deeper 3x3
# layer, like the last stage of CIFAR ResNet-20 (64 channels at 8x8, batch 32), where Winograd's transforms
# may pay for themselves in the forward and backward-data passes, while backward-filter (the kernel there is
# a whole 8x8 plane of dy) is another shape altogether, which the fused Winograd does not run. One tuner, the
# three passes of that layer:

# %%
deep = autotune.Tuner(benchmark=True)
xd = rng.standard_normal((32, 64, 8, 8), dtype=np.float32)
wd = rng.standard_normal((64, 64, 3, 3), dtype=np.float32) / 24
dyd = rng.standard_normal((32, 64, 8, 8), dtype=np.float32)
deep.conv2d(xd, wd, padding=1)
deep.conv2d_input(xd.shape, wd, dyd, padding=1)
deep.conv2d_weight(xd, wd.shape, dyd, padding=1)
by_layer["resnet20 stage 3 (batch 32)"] = {e.key.op: e for e in deep.dispatch_table()}
print(f"{'layer':<28}" + "".join(f"{op:>20}" for op in convalgos.PASSES))
for name, entries in list(by_layer.items())[-1:]:
    print(f"{name:<28}" + "".join(f"{entries[op].algo:>20}" for op in convalgos.PASSES))
distinct = {name: len({e.algo for e in entries.values()}) for name, entries in by_layer.items()}
layer = max(distinct, key=lambda name: (distinct[name], name.startswith("resnet")))
print(f"\n{layer}'s {len(by_layer[layer])} passes chose {distinct[layer]} distinct algorithm(s)"
      + ("" if distinct[layer] > 1 else ": on this machine now one algorithm won every pass of every layer "
         "shown, the deep one included"))
# %% [markdown]
# Why? For each pass of that layer, every candidate's median time during the tuning, relative to the pass's
# choice, and the arithmetic it does for that pass relative to the direct sum (`algorithm.flops(p, op) /
# p.flops`). The shapes of the passes differ, so does the arithmetic and the memory traffic of each
# algorithm, and so can the winner:

# %%
entries = by_layer[layer]
p = next(iter(entries.values())).key.params
print(f"{layer}: {p}")
for op, e in entries.items():
    ranked = sorted(e.times, key=e.times.get)
    print(f"\n{op}: chose {e.algo}" + (f" (tied within the noise: {', '.join(e.tied)})" if len(e.tied) > 1 else ""))
    print(f"    {'candidate':<22}{'median ms':>10}{'/ chosen':>10}{'FLOPs / direct sum':>20}")
    for n in ranked:
        flops = convalgos.ALGORITHMS[n].flops(p, op) / p.flops
        print(f"    {n + (' *' if n == e.algo else ''):<22}{e.times[n] * 1e3:>10.2f}"
              f"{e.times[n] / e.times[e.algo]:>10.2f}{flops:>20.2f}")
    if len(ranked) > 1:
        runner = next(n for n in ranked if n != e.algo)
        print(f"    {e.algo} ran {e.times[runner] / e.times[e.algo]:.2f}x faster than the next, {runner}")

names = sorted({n for e in entries.values() for n in e.times})
fig, ax = plt.subplots(figsize=(10, 3.8))
width = 0.8 / len(names)
ops = list(entries)
at = lambda i, n: i + (names.index(n) - (len(names) - 1) / 2) * width
for j, n in enumerate(names):
    xs = [at(i, n) for i, op in enumerate(ops) if n in entries[op].times]
    ratios = [entries[op].times[n] / entries[op].times[entries[op].algo] for op in ops if n in entries[op].times]
    ax.vlines(xs, 1, ratios, color=f"C{j}", lw=2)                 # a stem from 1: its length is the ratio
    ax.plot(xs, ratios, "o", color=f"C{j}", label=n)
for i, op in enumerate(ops):
    star = ax.plot(at(i, entries[op].algo), 1, "*", color=f"C{names.index(entries[op].algo)}", mec="k",
                   markersize=15)[0]
star.set_label("the pass's choice, in its colour")
ax.set_xticks(range(len(ops)), ops); ax.set_xlabel("pass")
ax.set_yscale("log"); ax.axhline(1, color="k", lw=0.5)
ticks = [t for t in (1, 2, 4, 8, 16, 32, 64, 128, 256) if t <= ax.get_ylim()[1]]
ax.set_yticks(ticks, [f"{t:g}x" for t in ticks]); ax.minorticks_off()
ax.set_ylabel("median in the tuning / choice's (log)")
ax.set_title(f"{layer} ({p.C}->{p.K}, {p.R}x{p.S}" + ("" if "batch" in layer else f", batch {p.N}")
             + "): every candidate per pass, against the pass's choice", fontsize=9)
ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
plt.tight_layout(); plt.show()

# %% [markdown]
# How to read it: each point is a candidate's time over the pass's choice (the star, at 1; the stem's length
# is how much slower it ran). Where the stars have different colours, the passes of one layer chose differently,
# which is why benchmark mode keys each pass on its own; the rows above give the margins and the arithmetic
# behind each choice. Where one algorithm wins every pass, the printout says so.
#
# What this notebook measured, against the articles' claim that benchmark mode speeds training up when the
# shapes stay fixed: the steady-step comparison says whether the tuned choices beat the heuristic's here, and
# by how much; the plot shows the price, a slow first step per new shape, paid again by the short last batch
# when it is kept (or whenever the batch size or image size changes: notebook 4, and its patience policy).
# `python -m autotune train --model lenet5 --data digits --epochs 10` trains to the end, with benchmark mode
# on and the first epoch's tuning shown apart.
