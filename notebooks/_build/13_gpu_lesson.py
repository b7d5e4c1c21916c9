# %% [markdown]
# # 13. A GPU step: host-bound steps, launches against kernels, CUDA graphs, and what the race must time
#
# This machine has no GPU. The project has one hardware record, taken on an NVIDIA H200, and this notebook
# teaches from it: every hardware number below is **read from the stored record** (parsed, not retyped) and
# labelled with the date and commit it was measured at. Beside it, the same API runs in the **Numba CUDA
# simulator** (NumPy arrays stand in for device arrays, each CUDA thread runs as Python): it shows what the code
# does, never how fast a GPU is.
#
# The questions:
#
# 1. **Where does a GPU training step's time go?** A GPU runs kernels; the host (Python, the CPU) issues them,
#    one launch each. When issuing takes longer than running, the step is **host-bound** and the GPU idles.
# 2. **Launches against kernels**: what one launch costs the host, what one kernel costs the GPU.
# 3. **Why CUDA graphs exist**: a graph records a step's launches once and replays them with one call.
# 4. **Why the race must time what the step pays**: cuDNN's benchmark mode times GPU time; a host-bound step
#    pays host time.
#
# The simulator must be chosen before Numba is first imported, so the first cell sets `NUMBA_ENABLE_CUDASIM`
# before anything imports numba (the header below imports autotune, which does).

# %%
import os
os.environ["NUMBA_ENABLE_CUDASIM"] = "1"     # before numba is imported: the simulated GPU
import machine      # notebooks/machine.py: the header every notebook prints
machine.describe()
import json, pathlib, re, sys
import autotune, convalgos    # first: it sets the thread variables that numpy's OpenBLAS reads when it loads
import convalgos.cuda
import numpy as np
import matplotlib.pyplot as plt
from convalgos.arrays import simulator_enabled
print("Numba CUDA simulator:", simulator_enabled())
assert simulator_enabled()

# %% [markdown]
# ## The record
#
# `bench/results/gpu-h200.md` is the report `python -m bench.gpu_check` wrote on the H200 (its first line says
# how it was taken). A second file, `probe-2026-12-04.json` in the shared GPU folder beside this checkout
# (`shared/gpu/`, written by `shared/gpu/probe.py` on the same lent machine that day, per
# `shared/gpu/README.md`), holds what the check did not measure: kernels per step, GPU kernel time per step
# (torch.profiler), and the cost of a launch by each route. Both are parsed here.

# %%
RECORD = pathlib.Path("../bench/results/gpu-h200.md")
text = RECORD.read_text()
lines = text.splitlines()
provenance = lines[0]
commit = re.search(r"from commit ([0-9a-f]{7,40})", provenance).group(1)
taken = re.search(r"(\d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC)", provenance).group(1)
device = re.search(r"\| device \| yes \| ([^|]+) \|", text).group(1).strip()
LABEL = f"stored hardware measurement: {device}, {taken}, commit {commit}"
print(LABEL)

def tables(heading):
    """The rows (dicts by column) of every markdown table in the section that starts with ``heading``."""
    start = next(i for i, line in enumerate(lines) if line.startswith(heading))
    rows, header = [], None
    for line in lines[start + 1:]:
        if line.startswith("## "):
            break
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
        elif not all(set(c) <= set("-: ") for c in cells):
            rows.append(dict(zip(header, cells)))
    return rows

launch_rows = tables("## Per-launch cost")
steps = {(r["model"], r["what"]): {k: float(r[k]) for k in ("autotuned", "heuristic", "torch cuDNN")}
         for r in tables("## Forward pass and training step")}
gain = {m.group(1): float(m.group(2)) for m in
        re.finditer(r"- (\w+) b32: benchmark mode's gain over the heuristic ([\d.]+)x per step", text)}
print(f"{len(launch_rows)} launch routes timed (section 2 lists them)")
for (model, what), ms in steps.items():
    print(f"{model} b32 {what}: " + ", ".join(f"{who} {v:.2f} ms" for who, v in ms.items()))
print("benchmark mode's gain over the heuristic, per step:", gain)

PROBE = pathlib.Path("../..").resolve() / "shared" / "gpu" / "probe-2026-12-04.json"
probe = json.loads(PROBE.read_text()) if PROBE.exists() else None
probe_date = re.search(r"\d{4}-\d{2}-\d{2}", PROBE.name).group(0)
PROBE_LABEL = (f"stored hardware measurement: {device}, {probe_date}, shared/gpu/probe.py (the file does not "
               "record its commit)")
print(f"probe: {PROBE} " + (f"read; {PROBE_LABEL}" if probe else
                            "not found here: the sections that need it say so and skip"))

# %% [markdown]
# ## 1. Where a step's time goes
#
# torch.profiler listed every kernel of the process during the steps: how many ran per step, and their summed
# GPU time. The wall time per step is what the program waited. If the GPU were the bottleneck, the two times
# would be close; the GPU-busy fraction (kernel time / wall time) says how far they are.

# %%
if probe:
    nets = {"ResNet-20 b32": ("resnet20_b32", "resnet20"), "ResNet-18 b32": ("resnet18_b32", "resnet18")}
    print(f"{'':<15}{'kernels/step':>14}{'GPU ms/step':>13}{'wall ms/step':>14}{'GPU busy':>10}"
          f"{'host us/kernel':>16}{'GPU us/kernel':>15}   ({PROBE_LABEL})")
    per = {}
    for label, (key, model) in nets.items():
        q = probe[key]
        per[label] = {"host": q["wall_ms_per_step"] / q["kernels_per_step"] * 1e3,
                      "gpu": q["gpu_kernel_ms_per_step"] / q["kernels_per_step"] * 1e3, **q}
        print(f"{label:<15}{q['kernels_per_step']:>14.0f}{q['gpu_kernel_ms_per_step']:>13.2f}"
              f"{q['wall_ms_per_step']:>14.2f}"
              f"{q['gpu_busy_fraction']:>10.0%}{per[label]['host']:>16.1f}{per[label]['gpu']:>15.1f}")
        print(f"{'  torch cuDNN':<15}{q['torch_kernels_per_step']:>14.0f}{q['torch_gpu_kernel_ms_per_step']:>13.2f}"
              f"{steps[model, 'step']['torch cuDNN']:>14.2f}   (wall: the check's run, benchmark on, commit {commit})")
    kinds = {"Numba kernels (convalgos)": ("convalgos::",), "CuPy elementwise and reductions": ("cupy_",),
             "cuBLAS / CUTLASS GEMMs": ("cutlass", "cublas", "gemm")}
    top = probe["resnet20_b32"]["top_kernels"]            # [name, launches per step, ms per step]
    counted = {kind: sum(n for name, n, _ in top if any(tag in name for tag in tags)) for kind, tags in kinds.items()}
    print(f"\nResNet-20's 25 most expensive kernels by kind, launches per step: {counted} "
          f"({sum(n for _, n, _ in top):.0f} of its {probe['resnet20_b32']['kernels_per_step']:.0f})")
    total20 = probe["resnet20_b32"]["kernels_per_step"]
    unlisted = total20 - sum(n for _, n, _ in top)          # kernels outside the top 25: counted as convs, at most
    record_conv_share = (counted["Numba kernels (convalgos)"] + counted["cuBLAS / CUTLASS GEMMs"] + unlisted) / total20

    fig, ax = plt.subplots(figsize=(9, 3.2))
    bars = [(f"{label}, autotune", per[label]["wall_ms_per_step"], per[label]["gpu_kernel_ms_per_step"])
            for label in nets] + [(f"{label}, torch cuDNN", steps[model, "step"]["torch cuDNN"],
                                   probe[key]["torch_gpu_kernel_ms_per_step"]) for label, (key, model) in nets.items()]
    ys = np.arange(len(bars))
    ax.barh(ys, [b[1] for b in bars], color="lightgray", label="wall time per step")
    ax.barh(ys, [b[2] for b in bars], height=0.4, color="C0", label="GPU kernel time per step")
    ax.set_yticks(ys); ax.set_yticklabels([b[0] for b in bars], fontsize=8); ax.invert_yaxis()
    ax.set_xlabel("ms per training step"); ax.legend(fontsize=8, loc="lower right")
    ax.set_title(f"H200, {taken[:10]}: the gray beyond the blue is the GPU waiting for the host\n"
                 f"(autotune: the probe's steps; torch's wall time: the check's run, commit {commit})", fontsize=9)
    plt.show()

    r20 = per["ResNet-20 b32"]
    print(f"ResNet-20's step: {r20['kernels_per_step']:.0f} kernels, each {r20['gpu']:.1f} us of GPU time on average "
          f"but {r20['host']:.1f} us of wall time: the GPU was busy {r20['gpu_busy_fraction']:.0%} of the step. The "
          f"step is host-bound: its time is the host issuing kernels, not the GPU running them")
    assert r20["host"] > 2 * r20["gpu"] and r20["gpu_busy_fraction"] < 0.5
    assert r20["kernels_per_step"] > 3 * r20["torch_kernels_per_step"]
else:
    print(f"{PROBE} is not in this checkout's neighbourhood: kernels per step and GPU time per step are not shown")

# %% [markdown]
# ## 2. Launches against kernels
#
# What does one launch cost the host? The check timed 2000 back-to-back launches of a one-thread kernel (one
# synchronise at the end), by the route the arguments take; the probe added more routes. A launch is not the
# kernel: it is the host's work to get a kernel queued (Python dispatch, argument conversion through ctypes,
# the driver call). And a step's host time is more than its launches: the layers' Python code runs between
# them.

# %%
routes = {f"Numba: {r['arrays handed over as']}": float(r["us per launch"]) for r in launch_rows}
if probe:
    routes.update({f"probe: {name}": (v if isinstance(v, float) else v["us_per_kernel"])
                   for name, v in probe["launch_us"].items()})
for name, us in sorted(routes.items(), key=lambda kv: kv[1]):
    print(f"{us:8.2f} us  {name}")
eager_routes = {k: v for k, v in routes.items() if "graph" not in k}
graph_routes = {k: v for k, v in routes.items() if "graph" in k}
numba_route = (probe["launch_us"]["numba lazy, CuPy array, gpu_base.launch"] if probe else
               float(launch_rows[1]["us per launch"]))        # how a convalgos kernel is launched
if probe:
    r20 = per["ResNet-20 b32"]
    launches_floor = r20["kernels_per_step"] * min(eager_routes.values()) / 1e3
    print(f"\nResNet-20's {r20['kernels_per_step']:.0f} launches at the cheapest eager route "
          f"({min(eager_routes.values()):.1f} us) "
          f"are {launches_floor:.1f} ms of a {r20['wall_ms_per_step']:.1f} ms step; at the route a convalgos kernel "
          f"takes ({numba_route:.1f} us) they would be "
          f"{r20['kernels_per_step'] * numba_route / 1e3:.1f} ms: "
          f"the GPU's whole kernel time is {r20['gpu_kernel_ms_per_step']:.1f} ms")
    assert launches_floor < r20["wall_ms_per_step"]

# %% [markdown]
# ## 3. Why CUDA graphs exist
#
# A CUDA graph is a recorded sequence of kernels (with their arguments and the memory they touch) that the
# driver replays with one call: no Python, no argument conversion, no per-kernel launch from the host. The
# probe captured launches on a stream and replayed them: the cost per kernel is the last lines of the list
# above. Replayed, ResNet-20's step would cost the host its kernels times that, far below its GPU time, so the
# step would become **GPU-bound**. A prediction from the record, not a measured graphed step (the record holds
# none):

# %%
if probe:
    replay_us = max(graph_routes.values())
    host_graph_ms = r20["kernels_per_step"] * replay_us / 1e3
    predicted = max(host_graph_ms, r20["gpu_kernel_ms_per_step"])
    print(f"replay: {replay_us:.2f} us per kernel ({min(eager_routes.values()) / replay_us:.0f}x below the cheapest "
          f"eager launch, {numba_route / replay_us:.0f}x below a convalgos kernel's route); ResNet-20's "
          f"{r20['kernels_per_step']:.0f} kernels replayed: {host_graph_ms:.2f} ms of host time against "
          f"{r20['gpu_kernel_ms_per_step']:.2f} ms of GPU time; predicted step max(host, GPU) = {predicted:.2f} ms "
          f"against {r20['wall_ms_per_step']:.2f} ms eager ({r20['wall_ms_per_step'] / predicted:.1f}x), if nothing "
          "else in the step ran on the host")
    assert host_graph_ms < r20["gpu_kernel_ms_per_step"] and 5 * replay_us < min(eager_routes.values())

# %% [markdown]
# `autotune.cuda_graph(step)` does this for a training step (`autotune/graph.py`): the first call per input shape
# runs eagerly (and tunes), the second captures the step into a graph on a side stream, every later call copies
# the inputs into the graph's static buffers and replays it. What a graph cannot hold is refused with a
# `CaptureError` naming the rule: a host synchronisation inside the step (reading the loss with `float()`), a
# tuner miss (a shape or path the eager call did not take). Here is the same API on the simulated GPU, on a
# small net (the simulator runs every CUDA thread in Python, so a ResNet would take minutes). In the simulator
# there is no graph: the capture and the replays run the step eagerly on the static buffers, under the same
# checks. The convs rank im2col first (the simulator's cheapest, as `tests/gpu` does), with benchmark mode off.

# %%
from autotune import nn, optim
from autotune.heuristics import Heuristics
from autotune.nn.device import move, to_host

sys.setswitchinterval(1e-4)     # the simulator's barriers are thread switches: quicker ones (tests/gpu/conftest.py)
gpu_tuner = autotune.simulated_gpu_tuner()
gpu_tuner.heuristics = Heuristics({"rules": [{"name": "im2col first (the simulator's cheapest)", "when": {},
                                               "order": ["im2col"]}]})

def small_net():
    rng = np.random.default_rng(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1, rng=rng), nn.BatchNorm2d(4), nn.ReLU(),
                         nn.Conv2d(4, 4, 3, padding=1, rng=rng), nn.ReLU(), nn.Flatten(),
                         nn.Linear(4 * 8 * 8, 3, rng=rng)).to("cuda").train()

def train_step_of(net):
    opt, loss_fn = optim.SGD(net, lr=0.1, momentum=0.9), nn.CrossEntropyLoss().to("cuda")

    def train_step(x, labels):
        loss = loss_fn(net(x), labels)
        net.zero_grad()
        net.backward(loss_fn.backward())
        opt.step()
        return loss                      # a device array: read it outside the step
    return train_step

rng = np.random.default_rng(1)
batches = [(move(rng.standard_normal((2, 1, 8, 8)).astype(np.float32), "cuda"), np.array([0, 2])) for _ in range(3)]
eager_net, graphed_net = small_net(), small_net()
eager = train_step_of(eager_net)
per_step = []
for x, labels in batches:
    with convalgos.cuda.count_ops() as ops:
        eager(x, labels)
    per_step.append(ops)
print("device operations per eager step:", [ops.total for ops in per_step])
print("by name:", dict(per_step[-1].by_name.most_common()))
conv_ops = sum(n for name, n in per_step[-1].by_name.items() if name.startswith(("im2col.", "cublas.gemm")))
print(f"of {per_step[-1].total}, at most {conv_ops} serve the convolutions (im2col's kernels and the GEMMs, which the "
      "Linear layer shares); the rest are BatchNorm, ReLU, the loss, SGD and copies")
if probe:
    print(f"the probe's ResNet-20 step ({probe_date}; shared/gpu/README.md: its launches were mostly CuPy "
          f"elementwise operations of BatchNorm, ReLU, pooling, the loss and SGD, Numba kernels here today): at most "
          f"{record_conv_share:.0%} of its kernels were convalgos' kernels or GEMMs (the {unlisted:.0f} outside the "
          f"top 25 counted as such); here {conv_ops / per_step[-1].total:.0%}: in both, most launches are not the "
          "convolutions'")
    assert record_conv_share < 0.5 and conv_ops / per_step[-1].total < 0.5
assert len({ops.total for ops in per_step}) == 1     # the same launches every step: what a graph can replay

graph_mode_before = gpu_tuner.graph_mode
graphed = autotune.cuda_graph(train_step_of(graphed_net))
for x, labels in batches:
    graphed(x, labels)
print(f"\n{graphed!r}")
print(f"the simulated GPU's tuner in graph mode: {graph_mode_before} before cuda_graph, {gpu_tuner.graph_mode} after")
same = all(np.array_equal(to_host(graphed_net.state_dict()[k]), to_host(v)) for k, v in eager_net.state_dict().items())
print(f"parameters after 3 graphed steps equal those after 3 eager steps: {same}")
assert (graphed.eager_calls, graphed.captures, graphed.replays) == (1, 1, 1) and same and gpu_tuner.graph_mode

reads_loss = autotune.cuda_graph(lambda x, labels, step=train_step_of(small_net()): float(step(x, labels)))
reads_loss(*batches[0])                 # eager: reading the loss is fine
try:
    reads_loss(*batches[1])             # capture: refused
    refused = None
except autotune.CaptureError as error:
    refused = str(error)
print(f"\nreading the loss inside a graphed step: {refused}")
assert refused and "host synchronisation" in refused

# %% [markdown]
# ## 4. Why the race must time what the step pays
#
# cuDNN's benchmark mode, and this library's race until the record above, timed each candidate's GPU time
# between CUDA events. On ResNet-18, whose kernels are long, that is what the step pays; on ResNet-20, whose step
# is host-bound, it is not: a candidate with fast kernels but more launches, or a slower route, costs the step
# its host time. The record shows the consequence, step against step:

# %%
for model in ("resnet18", "resnet20"):
    s = steps[model, "step"]
    print(f"{model} b32 step: benchmark mode {s['autotuned']:.2f} ms, the heuristic's picks {s['heuristic']:.2f} ms: "
          f"benchmark mode's gain {gain[model]:.2f}x ({LABEL})")
assert gain["resnet18"] > 1 > gain["resnet20"]
if probe:
    busy = {m: probe[f"{m}_b32"]["gpu_busy_fraction"] for m in ("resnet18", "resnet20")}
    print(f"benchmark mode lost on the net whose GPU was busy {busy['resnet20']:.0%} of the step and won on the one "
          f"busy {busy['resnet18']:.0%} (the busy fractions: the probe's steps, the same day and machine)")
    assert busy["resnet20"] < busy["resnet18"]

# %% [markdown]
# How many launches does each candidate cost a call? The simulator counts them exactly (`convalgos.cuda.count_ops`,
# the same counter on a GPU), here for one small 3x3 layer, on a second call (the first also copies constants,
# such as Winograd's matrices, to the device once). With the record's launch costs (a convalgos Numba
# kernel by today's route; a CuPy operation or library call at the cheapest measured CuPy route, a floor), that is
# the host time a call costs before its kernels run at all:

# %%
from convalgos import ConvParams
x = rng.standard_normal((1, 4, 6, 6)).astype(np.float32)
w = rng.standard_normal((4, 4, 3, 3)).astype(np.float32)
p = ConvParams.from_arrays(x, w, padding=1)
other_us = min(eager_routes.values())
host_floor = {}
for name, algorithm in convalgos.cuda.ALGORITHMS.items():
    if not algorithm.supports(p):
        continue
    convalgos.run(algorithm, "forward", x, w, p)        # the first call copies constants to the device once
    with convalgos.cuda.count_ops() as ops:
        convalgos.run(algorithm, "forward", x, w, p)
    kernels = sum(n for op, n in ops.by_name.items() if op.endswith("_kernel"))
    host_floor[name] = (ops.total, kernels * numba_route + (ops.total - kernels) * other_us)
for name, (n, us) in sorted(host_floor.items(), key=lambda kv: kv[1][1]):
    print(f"{name:<22}{n:>3} launch{'es' if n > 1 else '  '}, host floor {us:6.1f} us per call")
cheapest = min(us for _, us in host_floor.values())
if probe:
    print(f"\nthe cheapest candidate's host floor, {cheapest:.0f} us, is {cheapest / r20['gpu']:.0f}x the GPU time of "
          "the "
          f"ResNet-20 step's average kernel ({r20['gpu']:.1f} us): on such layers a call's cost is its launches, and "
          "ranking by GPU time ranks by the wrong clock")
    assert cheapest > r20["gpu"]
assert len({n for n, _ in host_floor.values()}) > 1    # candidates differ in launches, so in host cost

# %% [markdown]
# So the race now times what the step pays (`autotune/race/rounds.py`). On a GPU its timer measures both: the
# host's time to issue a call and the GPU time between events. An eager step pays the larger of the two per
# call (the host issues the next call while the GPU runs this one), so that is a candidate's cost; a step
# replayed as a CUDA graph pays its GPU time only (the host issued it once, at capture), so `cuda_graph` puts its
# tuners in graph mode (printed above) and the race then compares GPU times. Which of the two decided is
# written in the dispatch table's entry. On the CPU there is one clock, and this question does not arise.
#
# What the simulator cannot show: any time. Its launches cost Python threads, its kernels run in Python, and its
# "graph" is an eager call: every timing claim above is the H200's, from the record and its date.
