# %% [markdown]
# # 10. A roofline of this machine
#
# How fast *could* a convolution run here? The **roofline model** (Williams, Waterman & Patterson, "Roofline:
# an insightful visual performance model for multicore architectures", CACM 52(4), 2009) answers with two
# numbers of the machine and one of the algorithm:
#
# - the machine's **peak arithmetic rate** P (FLOP/s) and its **memory bandwidth** B (bytes/s);
# - the algorithm's **arithmetic intensity** I = FLOPs / bytes moved to and from memory.
#
# An algorithm cannot run faster than P, nor compute faster than its bytes arrive, B x I. So its attainable
# rate is min(P, B x I): on a log-log plot, a slanted roof (memory-bound) meeting a flat one (compute-bound)
# at the **ridge point** I = P / B. Here we measure P and B on this machine with two small kernels, count each
# algorithm's FLOPs and bytes on four layers, time it, and put every (algorithm, layer) under the roof.

# %%
import time
import machine      # notebooks/machine.py: the header every notebook prints
machine.describe()
import convalgos    # first: it sets the thread variables that numpy's OpenBLAS reads when it loads
import numba
import numpy as np
import matplotlib.pyplot as plt
from convalgos import ALGORITHMS, ConvParams
from convalgos.kernels import simd
from autotune import measure

rng = np.random.default_rng(0)
THREADS = numba.get_num_threads()     # the threads convalgos' kernels run on
print(f"Numba threads: {THREADS}; one vector register: {simd.REGISTER_BYTES * 8} bits "
      f"({simd.REGISTER_BYTES // 4} float32 lanes)")

# %% [markdown]
# ## The peak: multiply-adds from registers
#
# A fused multiply-add (FMA) computes c = a x b + c in one instruction, 2 FLOPs per lane. To reach the peak, a
# kernel must issue FMAs on whole vector registers every cycle, with no memory access and no dependence
# stalling the pipeline: an FMA's result is ready only a few cycles after it starts, so one chain c ← c x a + b
# runs at one FMA per latency, and several **independent chains** are needed to keep the FMA units busy. The
# kernel below keeps 12 chains in registers (`convalgos.kernels.simd.Vec`: the register type the library's
# own kernels block their accumulators in), on every Numba thread (`prange`), and its FLOPs are counted
# exactly: threads x iterations x 12 chains x lanes x 2.

# %%
CHAINS = 12

@numba.njit(cache=True, parallel=True)
def fma_chains(seed, iterations, out):
    """Each thread: 12 independent chains c <- c * a + b on whole registers, `iterations` times; out: their sum."""
    lanes = simd.lanes(seed)
    for t in numba.prange(out.shape[0] // lanes):
        a, b = simd.load(seed, 0), simd.load(seed, lanes)
        c0 = c1 = c2 = c3 = c4 = c5 = c6 = c7 = c8 = c9 = c10 = c11 = simd.load(seed, 2 * lanes)
        for _ in range(iterations):
            c0 = simd.fma(c0, a, b); c1 = simd.fma(c1, a, b); c2 = simd.fma(c2, a, b); c3 = simd.fma(c3, a, b)
            c4 = simd.fma(c4, a, b); c5 = simd.fma(c5, a, b); c6 = simd.fma(c6, a, b); c7 = simd.fma(c7, a, b)
            c8 = simd.fma(c8, a, b); c9 = simd.fma(c9, a, b); c10 = simd.fma(c10, a, b); c11 = simd.fma(c11, a, b)
        s = simd.add(simd.add(simd.add(c0, c1), simd.add(c2, c3)), simd.add(simd.add(c4, c5), simd.add(c6, c7)))
        simd.store(out, t * lanes, simd.add(s, simd.add(simd.add(c8, c9), simd.add(c10, c11))))

LANES = simd.REGISTER_BYTES // 4
seed = np.concatenate([np.full(LANES, 0.5), np.full(LANES, 0.25), np.full(LANES, 1.0)]).astype(np.float32)
chains_out = np.empty(THREADS * LANES, np.float32)
ITERATIONS = 200_000                   # about a millisecond: as short as the layers' calls (see below)
fma_chains(seed, 10, chains_out)                        # compile (or load from Numba's cache)

FMA_FLOPS = THREADS * ITERATIONS * CHAINS * LANES * 2
run_fma = lambda: fma_chains(seed, ITERATIONS, chains_out)          # noqa: E731

def peak_flops(repeats=21):
    """The best of `repeats` runs, in FLOP/s (the fastest run is the one least disturbed)."""
    return FMA_FLOPS / min(measure.Timer().time(run_fma) for _ in range(repeats))

peak = peak_flops()
assert np.allclose(chains_out, 12 * 0.25 / (1 - 0.5), rtol=1e-3)   # every chain converged to b / (1 - a): it ran
print(f"peak: {peak / 1e9:.0f} GFLOP/s on {THREADS} threads ({peak / THREADS / 1e9:.0f} per thread)")

# %% [markdown]
# ## The bandwidth: a streaming triad
#
# STREAM's triad (McCalpin, "Memory bandwidth and machine balance in current high performance computers",
# 1995), a[i] = b[i] + s x c[i], reads two arrays and writes one. Each array is made 4x the size of the
# last-level cache (read from Linux's sysfs) so that nothing stays cached between passes, and the bytes are
# counted as STREAM counts them: 3 x 4 bytes per element (the write-allocate read of a, which the hardware may
# also do, is not counted, so B is if anything an underestimate of the traffic the memory served).

# %%
def cache_bytes(index, default):
    """A cache's size from Linux's sysfs (index 2: L2, index 3: L3), or the default where it cannot be read."""
    try:
        with open(f"/sys/devices/system/cpu/cpu0/cache/index{index}/size") as f:
            text = f.read().strip()
        return int(text[:-1]) * {"K": 1 << 10, "M": 1 << 20}[text[-1]]
    except (OSError, ValueError, KeyError):
        return default

@numba.njit(cache=True, parallel=True)
def triad(a, b, c, s):
    for i in numba.prange(a.shape[0]):
        a[i] = b[i] + s * c[i]

l2, l3 = cache_bytes(2, 1 << 20), cache_bytes(3, 32 << 20)
n = 4 * l3 // 4
stream = [np.zeros(n, np.float32), np.ones(n, np.float32), np.ones(n, np.float32)]     # a, b, c
triad(*stream, np.float32(2.0))

TRIAD_BYTES = 3 * 4 * n
run_triad = lambda: triad(*stream, np.float32(2.0))                 # noqa: E731

def bandwidth(repeats=7):
    return TRIAD_BYTES / min(measure.Timer().time(run_triad) for _ in range(repeats))

bw = bandwidth()
print(f"L2 {l2 / 2**20:.1f} MiB per core, L3 {l3 / 2**20:.0f} MiB; arrays of {4 * n / 2**20:.0f} MiB each")
print(f"bandwidth: {bw / 1e9:.1f} GB/s; ridge point P / B = {peak / bw:.1f} FLOP/byte")

# %% [markdown]
# ## Each algorithm's intensity
#
# **FLOPs**: each algorithm's own count for the layer, `algorithm.flops(p)`: what it really computes (direct's
# junk columns of its polyphase rows, Winograd's transforms and fewer products, FFT's transforms and spectral
# products), not the textbook 2·N·K·C·R·S·Ho·Wo (`p.flops`).
#
# **Bytes**, a stated model (the one `autotune/heuristics.py` seeds the GPU's ranking with): the operands x, w
# and y moved once each, plus the workspace written once and read once, `2 x algorithm.workspace_bytes(p)`.
# It is a model, not a measurement: a kernel that re-reads its input (im2col's patch matrix reads x R·S times
# while building it) moves more, and operands or a workspace that stay in the caches (L2 above) move less from
# memory. The roof is measured again in every round of the layers' timing (the
# two kernels above run interleaved with the algorithms, and the fastest run of each stands), so that the
# points and the roof are taken at the same moments of a possibly busy machine; the FMA kernel runs about a
# millisecond, as long as a layer's call, since on a shared machine a short run is more often undisturbed
# than a long one. The four layers: a ResNet-20 3x3 on 16 channels, a VGG-like 3x3 on
# 128, a pointwise 1x1 on 256 and the 7x7 stride-2 stem of a ResNet (3 input channels).

# %%
LAYERS = {
    "ResNet-20 3x3, 16 ch": ((8, 16, 32, 32), (16, 16, 3, 3), 1, 1),
    "VGG 3x3, 128 ch": ((1, 128, 28, 28), (128, 128, 3, 3), 1, 1),
    "1x1, 256 ch": ((4, 256, 14, 14), (256, 256, 1, 1), 1, 0),
    "7x7 stride 2, 3 ch": ((2, 3, 112, 112), (64, 3, 7, 7), 2, 3),
}
points = []             # one dict per (layer, algorithm)
first_peak, first_bw = peak, bw
for label, (x_shape, w_shape, stride, pad) in LAYERS.items():
    x = rng.standard_normal(x_shape, dtype=np.float32)
    w = rng.standard_normal(w_shape, dtype=np.float32) / np.float32(np.sqrt(np.prod(w_shape[1:])))
    p = ConvParams.from_arrays(x, w, stride=stride, padding=pad)
    y = np.empty(p.out_shape, np.float32)
    runs = {name: a for name, a in ALGORITHMS.items() if a.supports(p)}
    calls = {name: (lambda a=a: convalgos.run(a, "forward", x, w, p, y)) for name, a in runs.items()}
    roof_calls = {f"peak {i}": run_fma for i in range(3)}
    samples = measure.interleaved({**calls, **roof_calls, "triad": run_triad}, rounds=5)
    peak = max([peak] + [FMA_FLOPS / min(samples[k]) for k in roof_calls])    # the roof, re-measured every round
    bw = max(bw, TRIAD_BYTES / min(samples["triad"]))
    operands = p.itemsize * (x.size + w.size + y.size)
    for name, a in runs.items():
        seconds = measure.median(samples[name])
        flops, moved = a.flops(p), operands + 2 * a.workspace_bytes(p)
        points.append({"layer": label, "algo": name, "seconds": seconds, "flops": flops, "bytes": moved,
                       "intensity": flops / moved, "rate": flops / seconds, "effective": p.flops / seconds,
                       "textbook": p.flops})

for q in points:
    q["roof"] = min(peak, bw * q["intensity"])
for label in LAYERS:
    rows = sorted((q for q in points if q["layer"] == label), key=lambda q: q["seconds"])
    print(f"{label}: textbook {rows[0]['textbook'] / 1e9:.2f} GFLOP")
    print(f"  {'algorithm':<20}{'ms':>9}{'GFLOP':>8}{'MB':>8}{'FLOP/B':>8}{'GFLOP/s':>9}{'roof':>7}"
          f"{'of roof':>9}{'effective':>11}")
    for q in rows:
        print(f"  {q['algo']:<20}{q['seconds'] * 1e3:>9.2f}{q['flops'] / 1e9:>8.2f}{q['bytes'] / 1e6:>8.1f}"
              f"{q['intensity']:>8.1f}{q['rate'] / 1e9:>9.1f}{q['roof'] / 1e9:>7.0f}{q['rate'] / q['roof']:>9.1%}"
              f"{q['effective'] / 1e9:>11.1f}")
print(f"\nroof: min({peak / 1e9:.0f} GFLOP/s, {bw / 1e9:.1f} GB/s x intensity), the best of every measurement of the "
      f"two kernels (the first ones above: {first_peak / 1e9:.0f} GFLOP/s, {first_bw / 1e9:.1f} GB/s); 'effective': "
      "the textbook FLOPs over the time, the rate a direct sum would need to match it")

# %%
fig, ax = plt.subplots(figsize=(10, 5.5))
intensities = np.logspace(-1, 3, 200)
ax.plot(intensities, np.minimum(peak, bw * intensities) / 1e9, "k-", lw=2)
ax.axvline(peak / bw, color="gray", ls=":", lw=1)
ax.text(peak / bw * 1.08, peak / 1e9 * 0.03, f"ridge {peak / bw:.1f} FLOP/B", color="gray", fontsize=8, rotation=90)
ax.text(0.12, bw * 0.12 / 1e9 * 2.2, f"B = {bw / 1e9:.1f} GB/s", rotation=24, fontsize=9)
ax.text(150, peak / 1e9 * 1.12, f"P = {peak / 1e9:.0f} GFLOP/s", fontsize=9)
markers = dict(zip(sorted({q["algo"] for q in points}), "o s D ^ v < > p h * X".split()))
colors = dict(zip(LAYERS, ("C0", "C1", "C2", "C3")))
for q in points:
    ax.plot(q["intensity"], q["rate"] / 1e9, markers[q["algo"]], color=colors[q["layer"]], markersize=7,
            alpha=0.85)
ax.set_xscale("log"); ax.set_yscale("log")
ax.set_xlabel("arithmetic intensity (FLOP per byte moved: operands + 2 x workspace)")
ax.set_ylabel("achieved GFLOP/s (the algorithm's own FLOPs / median time)")
ax.set_title(f"Roofline of this machine ({THREADS} threads, float32 forward passes)")
algo_handles = [plt.Line2D([], [], marker=m, color="gray", ls="", label=n) for n, m in markers.items()]
layer_handles = [plt.Line2D([], [], marker="o", color=c, ls="", label=n) for n, c in colors.items()]
first = ax.legend(handles=algo_handles, title="algorithm", fontsize=8, loc="upper left",
                  bbox_to_anchor=(1.01, 1.0))
ax.add_artist(first)
ax.legend(handles=layer_handles, title="layer", fontsize=8, loc="lower left", bbox_to_anchor=(1.01, 0.0))
ax.grid(alpha=0.3, which="both")
plt.show()

# %% [markdown]
# ## What it says
#
# Each conclusion below is printed from the table above and checked (`assert`): the notebook fails to run if
# this machine, or a change to an algorithm, makes one false. The timings are medians of 5 interleaved rounds
# on a machine that may be shared, so the checks leave room for 25% of noise.

# %%
over = max(points, key=lambda q: q["rate"] / q["roof"])
print(f"1. every algorithm runs under its roof: the closest is {over['algo']} on {over['layer']}, at "
      f"{over['rate'] / over['roof']:.0%} of min(P, B x I) = {over['roof'] / 1e9:.0f} GFLOP/s "
      f"({over['rate'] / peak:.0%} of the peak)")
assert over["rate"] <= 1.25 * over["roof"]

three = [label for label, (_, w_shape, stride, _) in LAYERS.items() if w_shape[2:] == (3, 3) and stride == 1]
for label in three:
    by = {q["algo"]: q for q in points if q["layer"] == label}
    wino = [n for n in by if n.startswith("winograd")]
    print(f"2. {label}: the Winograds do {min(by[n]['flops'] for n in wino) / by['direct']['flops']:.2f}-"
          f"{max(by[n]['flops'] for n in wino) / by['direct']['flops']:.2f}x direct's FLOPs at an intensity of "
          f"{min(by[n]['intensity'] for n in wino):.1f}-{max(by[n]['intensity'] for n in wino):.1f} FLOP/B against "
          f"direct's {by['direct']['intensity']:.1f}: fewer FLOPs, paid in bytes (their transforms go through "
          "a workspace), so they move left on the roofline")
    assert all(by[n]["flops"] < by["direct"]["flops"] and by[n]["intensity"] < by["direct"]["intensity"] for n in wino)

memory_bound = [q for q in points if q["intensity"] < peak / bw]
print(f"3. {len(memory_bound)} of {len(points)} points lie left of the ridge ({peak / bw:.1f} FLOP/B), where even a "
      "perfect kernel waits for memory: " + ", ".join(sorted({q['algo'] for q in memory_bound})))

spread = {}
for label in LAYERS:
    rows = [q for q in points if q["layer"] == label]
    fastest = min(rows, key=lambda q: q["seconds"])
    flat = sorted((q for q in rows if q["roof"] >= peak), key=lambda q: q["seconds"])     # compute-bound
    spread[label] = flat[-1]["seconds"] / flat[0]["seconds"] if len(flat) > 1 else 1.0
    print(f"4. {label}: fastest {fastest['algo']} ({fastest['seconds'] * 1e3:.2f} ms, {fastest['rate'] / 1e9:.0f} "
          f"GFLOP/s, {fastest['rate'] / fastest['roof']:.0%} of its roof); {len(flat)} algorithms under the same flat "
          f"roof (compute-bound: " + ", ".join(q["algo"] for q in flat) + f") took {flat[0]['seconds'] * 1e3:.2f}-"
          f"{flat[-1]['seconds'] * 1e3:.2f} ms ({spread[label]:.1f}x apart)")
print("   the same roof, several times apart in time: a roof bounds what an algorithm could reach, the distance "
      "below it is the implementation's, and a measurement (benchmark mode) is what ranks them")
assert max(spread.values()) > 2

# %% [markdown]
# Reading the plot: the slanted roof is memory, the flat one arithmetic. Points far below both are limited by
# neither: by instruction overheads, by the synchronisation of two threads on a small layer, by caches that
# are not the memory the roof measured. The fast algorithms of the course (Winograd, FFT) sit to the left of
# direct: they do fewer FLOPs, but each FLOP brings more bytes. How much that costs depends on where the ridge
# is, and machines differ there. The GPU this project has a record of, an H200, has a datasheet peak and
# bandwidth kept in `autotune/heuristics.json` (a seed for its ranking, not a measurement):

# %%
import json
seed_gpu = json.load(open("../autotune/heuristics.json"))["seeds"]["cuda"]
gpu_ridge = seed_gpu["flops_per_second"] / seed_gpu["bytes_per_second"]
print(f"H200 (datasheet, as heuristics.json cites it: {seed_gpu['source'].split(';')[0]}): "
      f"{seed_gpu['flops_per_second'] / 1e12:.0f} TFLOP/s, {seed_gpu['bytes_per_second'] / 1e12:.1f} TB/s, ridge "
      f"{gpu_ridge:.1f} FLOP/B; this machine, measured above: ridge {peak / bw:.1f} FLOP/B")
for label in three:
    by = {q["algo"]: q for q in points if q["layer"] == label}
    wino = min((n for n in by if n.startswith("winograd")), key=lambda n: by[n]["seconds"])
    print(f"{label}: {wino} at {by[wino]['intensity']:.1f} FLOP/B is "
          + ("memory-bound" if by[wino]["intensity"] < gpu_ridge else "compute-bound") + " on the H200's roof and "
          + ("memory-bound" if by[wino]["intensity"] < peak / bw else "compute-bound") + " on this machine's")

# %% [markdown]
# That is why the tuner measures instead of computing a roofline: the model says where the limits are on each
# machine, not which algorithm gets closest to them there.
