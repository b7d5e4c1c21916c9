# %% [markdown]
# # 7. Your torch model through the dispatcher
#
# `torch.backends.cudnn.benchmark = True` times cuDNN's algorithms for every convolution of a torch model, and
# never says what it chose. `autotune.torch` puts a torch model's convolutions through this project's
# dispatcher instead, all three passes of training under torch's autograd, and says what each chose:
#
# ```python
# model = autotune.torch.convert(model)        # every torch.nn.Conv2d, in place: same parameters, same optimizer
# autotune.benchmark = True                    # as torch.backends.cudnn.benchmark = True
# print(autotune.torch.report(model))          # per layer and pass: the choice, its time, the runner-up
# ```
#
# Here a small torch CNN, defined below, trains on scikit-learn's digits (`autotune.data.load_digits`: 1,797
# images of 8x8 resized to 32x32, 20% held out) with torch's own `DataLoader`, loss and `SGD`, three times from
# the same initial weights: plain torch, converted with benchmark mode off (the heuristic picks), and converted
# with benchmark mode on. Every conclusion printed is computed from the numbers beside it; they describe this
# machine and this run.

# %%
import copy, time
import machine      # notebooks/machine.py: the header every notebook prints
machine.describe()
import autotune, autotune.torch    # first: it sets how OpenMP threads wait, which torch reads when it loads
import torch
import numpy as np
import matplotlib.pyplot as plt
from torch import nn
from autotune import data, measure

x_train, y_train, x_test, y_test = (torch.from_numpy(a) for a in data.load_digits())
BATCH, EPOCHS = 64, 3
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x_train, y_train), batch_size=BATCH,
                                     shuffle=True, drop_last=True)      # one batch shape: tuned once
print(f"training images {tuple(x_train.shape)}, held out {tuple(x_test.shape)}; {len(loader)} batches of {BATCH} "
      f"per epoch; torch {torch.__version__} with {torch.get_num_threads()} threads")

# %% [markdown]
# ## The model: plain torch
#
# Three convolutions of different kinds (a 5x5 on 32x32 planes, a 3x3 on 16x16, a strided 3x3 on 8x8), each
# followed by BatchNorm and ReLU, which torch computes between our passes in every step.

# %%
class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 5, padding=2), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),     # 32 -> 16
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),    # 16 -> 8
            nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.BatchNorm2d(64), nn.ReLU())         # 8 -> 4
        self.classifier = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))

    def forward(self, x):
        return self.classifier(self.features(x))

torch.manual_seed(0)
initial = SmallCNN()
print(initial)

# %% [markdown]
# ## Training, three ways
#
# The loop is torch's; only `convert` differs. Each run has its own `autotune.Tuner` (its own dispatch table),
# so benchmark off and on do not share choices. The runs start from the same weights and see the same
# batches. Each step is timed; with benchmark mode on, the first step times every candidate algorithm of
# every pass of every layer. Numba loads each compiled kernel on its first use in a process: a cost of this
# library, not of either mode, and one that whichever run came first would pay alone. So every algorithm
# first runs every pass of each conv layer once, on a small batch:

# %%
import convalgos
start = time.perf_counter()
shape = (2, 1, 32, 32)
for conv in [m for m in initial.modules() if isinstance(m, nn.Conv2d)]:
    xs = np.random.default_rng(0).standard_normal(shape, dtype=np.float32)
    ws = conv.weight.detach().numpy()
    layer = dict(stride=conv.stride, padding=conv.padding, dilation=conv.dilation, groups=conv.groups)
    ys = convalgos.conv2d(xs, ws, **layer)
    for algo, a in convalgos.ALGORITHMS.items():
        ps = convalgos.ConvParams.from_arrays(xs, ws, **layer)
        if a.supports(ps, "forward"):
            convalgos.conv2d(xs, ws, algo=algo, **layer)
        if a.supports(ps, "backward_data"):
            convalgos.conv2d_input(xs.shape, ws, ys, algo=algo, **layer)
        if a.supports(ps, "backward_filter"):
            convalgos.conv2d_weight(xs, ws.shape, ys, algo=algo, **layer)
    shape = (2, conv.out_channels, ys.shape[2] // 2, ys.shape[3] // 2)      # after the pool that follows
print(f"compiled / loaded every kernel of every pass in {time.perf_counter() - start:.1f} s")

# %%
def train(model):
    """EPOCHS epochs of SGD on the digits; (seconds per step, held-out accuracy)."""
    torch.manual_seed(1)                                    # the same batches in every run
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    model.train()
    seconds = []
    for epoch in range(EPOCHS):
        for xb, yb in loader:
            start = time.perf_counter()
            opt.zero_grad()
            nn.functional.cross_entropy(model(xb), yb).backward()
            opt.step()
            seconds.append(time.perf_counter() - start)
    model.eval()
    with torch.no_grad():
        accuracy = (model(x_test).argmax(1) == y_test).float().mean().item()
    return np.array(seconds), accuracy

tuners = {"benchmark off": autotune.Tuner(benchmark=False), "benchmark on": autotune.Tuner(benchmark=True)}
models = {"plain torch": copy.deepcopy(initial)}
models.update({label: autotune.torch.convert(copy.deepcopy(initial), tuner=t) for label, t in tuners.items()})
results = {}
for label, model in models.items():
    seconds, accuracy = train(model)
    results[label] = dict(seconds=seconds, accuracy=accuracy)
    tuning = f", tuning {tuners[label].cache_info().tuning_seconds:.2f} s" if label in tuners else ""
    print(f"{label:<14} {len(seconds)} steps in {seconds.sum():5.2f} s (first step {seconds[0] * 1e3:5.0f} ms"
          f"{tuning}), held-out accuracy {accuracy:.1%}")

total = {label: r["seconds"].sum() for label, r in results.items()}
fastest = min(total, key=total.get)
print(f"\nover the {len(seconds)} steps, {fastest} took the least time: "
      + ", ".join(f"{label} {t:.2f} s ({t / total[fastest]:.2f}x)" for label, t in total.items()))
tuning = tuners["benchmark on"].cache_info().tuning_seconds
verdict = "won" if total["benchmark on"] < total["benchmark off"] else "lost"
print(f"benchmark on {verdict} against benchmark off over the whole run ({total['benchmark on']:.2f} s against "
      f"{total['benchmark off']:.2f} s), its {tuning:.2f} s of tuning included")

twin = copy.deepcopy(initial).eval()                     # plain torch, holding the benchmark-on run's weights
twin.load_state_dict(models["benchmark on"].state_dict())
with torch.no_grad():
    gap = (twin(x_test) - models["benchmark on"](x_test)).abs().max().item()
assert gap < 1e-3                                        # the converted model computes the same function
print(f"\nthe benchmark-on run's weights in a plain torch model give its held-out logits within {gap:.1e}: the "
      f"same function. Where the accuracies differ, the runs drifted apart: float32 rounding differs between "
      f"algorithms, and {len(seconds)} steps at this learning rate can amplify it (a ReLU input near zero takes "
      f"the other side)")

# %% [markdown]
# The steps above ran one after another while the machine's speed drifts, so the steady step of each is also
# re-timed in interleaved rounds (`autotune.measure.interleaved`: one step of each per round, on one batch;
# every call is a table hit by now).

# %%
xb, yb = next(iter(loader))
def one_step(model):
    opt = torch.optim.SGD(model.parameters(), lr=0.0)   # the update's cost, without moving the weights
    def step():
        opt.zero_grad()
        nn.functional.cross_entropy(model(xb), yb).backward()
        opt.step()
    return step

for model in models.values():
    model.train()
samples = measure.interleaved({label: one_step(m) for label, m in models.items()}, rounds=10)
steady = {label: measure.median(s) for label, s in samples.items()}

fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.8), gridspec_kw={"width_ratios": [2, 1]})
for label, r in results.items():
    left.plot(np.arange(1, len(r["seconds"]) + 1), r["seconds"] * 1e3, marker=".", lw=1, label=label)
left.set_yscale("log"); left.set_xlabel("training step"); left.set_ylabel("ms per step (log)")
left.set_title(f"during training: batch {BATCH}, {EPOCHS} epochs"); left.legend(fontsize=8)
right.bar(list(steady), [v * 1e3 for v in steady.values()], color=["C0", "C1", "C2"])
right.set_ylabel("ms per step (median)"); right.set_title("steady step, interleaved rounds")
right.tick_params(axis="x", labelsize=8)
plt.tight_layout(); plt.show()

for label, t in steady.items():
    print(f"{label:<14} steady step {t * 1e3:6.1f} ms ({measure.noise(samples[label]):.1%} noise), "
          f"{t / steady['plain torch']:.2f}x plain torch's")
on, off = steady["benchmark on"], steady["benchmark off"]
steps_run = len(results["benchmark on"]["seconds"])
tied = len(measure.tied_with_fastest({k: samples[k] for k in tuners}, tie_tolerance=0.01)) == 2
if tied:
    print(f"benchmark on and off tie within the noise: the tuned choices buy nothing over the heuristic's here, "
          f"and the {tuning:.1f} s of tuning are not paid back")
elif on < off:
    payback = tuning / (off - on)
    print(f"benchmark on is {off / on:.2f}x faster per step than off: its {tuning:.1f} s of tuning are paid back "
          f"after about {payback:.0f} steps ({payback / len(loader):.0f} epochs of {len(loader)}); this run trained "
          f"{steps_run} steps, so " + ("it was paid back" if payback <= steps_run else "it was not paid back here"))
else:
    print(f"benchmark on is {on / off:.2f}x slower per step than off: the choices made during one tuning do not "
          f"hold in this re-measurement, and its {tuning:.1f} s of tuning are lost")
best = min(steady, key=steady.get)
print(f"fastest steady step: {best}" + ("" if best == "plain torch" else
      f"; plain torch's step takes {steady['plain torch'] / steady[best]:.2f}x its time")
      + (f" (tied with it within the noise: {', '.join(n for n in measure.tied_with_fastest(samples, 0.01) if n != best)})"
         if len(measure.tied_with_fastest(samples, 0.01)) > 1 else ""))

# %% [markdown]
# ## What benchmark mode chose: the report
#
# `autotune.torch.report(model)` lists, per layer (its name in the model) and pass, the calls the dispatcher
# served and any torch served instead (bfloat16, `torch.autocast`, a pass without an algorithm: each logged
# once, with the reason), the choice with its median time, and the runner-up. The first layer has no
# backward_data: its input needs no gradient, and autograd does not ask for it.

# %%
report = autotune.torch.report(models["benchmark on"])
print(report)

# %% [markdown]
# ## One layer, three passes, three kinds of work
#
# Each pass of a layer is its own problem: backward-data is a convolution of dy with the flipped filter,
# backward-filter one whose "kernel" is a whole plane of dy. So the dispatcher keys each pass on its own, and
# the choices can differ. Below, the layer whose passes chose the most distinct algorithms, with every
# candidate's median time in the tuning.

# %%
layers = report.to_dict()["layers"]
chosen = {name: {op: r["algorithm"] for op, r in passes.items() if r["algorithm"]} for name, passes in layers.items()}
name = max(chosen, key=lambda n: (len(set(chosen[n].values())), len(chosen[n])))
conv = dict(models["benchmark on"].named_modules())[name]
entries = {e.key.op: e for e in tuners["benchmark on"].dispatch_table()
           if e.key.params.weight_shape == tuple(conv.weight.shape) and e.key.params.N == BATCH}
p = next(iter(entries.values())).key.params
print(f"{name}: {p}")
for op, e in entries.items():
    ranked = sorted(e.times, key=e.times.get)
    print(f"\n{op}: " + ", ".join(f"{n}{' *' if n == e.algo else ''} {e.times[n] * 1e3:.2f} ms" for n in ranked))
    if len(ranked) > 1:
        runner = next(n for n in ranked if n != e.algo)
        print(f"    chose {e.algo}, {e.times[runner] / e.times[e.algo]:.2f}x faster than the next, {runner}"
              + (f" (a tie within the noise: {', '.join(e.tied)})" if len(e.tied) > 1 else ""))
distinct = sorted(set(chosen[name].values()))
everywhere = sorted({a for passes in chosen.values() for a in passes.values()})
print(f"\n{name}'s {len(chosen[name])} passes chose {len(distinct)} distinct algorithm(s): {', '.join(distinct)}"
      + ("" if len(distinct) > 1 else "; no layer's passes chose more on this run")
      + f". Over every layer and pass: {', '.join(everywhere)}")

# %% [markdown]
# How to read it: each pass lists its candidates fastest first, the star on the choice. Where the passes of one
# layer carry their stars on different algorithms, one choice per layer (let alone per model) would have been
# slower for some pass; the margins say by how much. Where the margin is small, another run may choose
# otherwise: near-ties are listed, and notebook 5 shows how they are broken.
#
# What to do with your own model: `convert` it, turn benchmark mode on, train as before, and read the report;
# `autotune.torch.revert(model)` gives the plain `torch.nn.Conv2d` layers back, with the same parameters.
