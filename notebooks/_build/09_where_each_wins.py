# %% [markdown]
# # 9. Where each algorithm wins, and why
#
# Notebook 1 showed how each algorithm computes a convolution; notebook 2 that benchmark mode picks per
# layer. This one measures three places where the winner changes, each beside the count that explains it:
#
# 1. **kernel size**: the direct sum does R·S multiply-adds per output and channel pair, FFT's cost barely
#    depends on R·S. Measured on a narrow layer (few channels) and a wide one;
# 2. **fused or not**: Winograd's transformed tiles kept in the cache, block by block, or sent through memory;
# 3. **inference or training**: a weight transform paid once (prepared weights) or at every step.
#
# Every number is measured when the notebook runs (`autotune.measure`: interleaved rounds, the median), and
# every conclusion printed is computed from the numbers beside it, including when this machine disagrees
# with the textbook.

# %%
import machine      # notebooks/machine.py: the header every notebook prints
machine.describe()
import convalgos    # first: it sets the thread variables that numpy's OpenBLAS reads when it loads
import numpy as np
import matplotlib.pyplot as plt
from convalgos import ALGORITHMS, ConvParams
from autotune import measure

rng = np.random.default_rng(0)

# %% [markdown]
# ## 1. FFT's crossover with kernel size
#
# Per output pixel, the direct sum costs 2·C·K·R·S FLOPs. FFT transforms each of the C input planes and the
# K output planes (a cost per plane, growing only with the log of the padded size) and multiplies spectra:
# 8·C·K real FLOPs per frequency (a complex multiply-add), on a padded plane a little larger than the output.
# So the direct sum grows with R·S and FFT does not: FFT wins above some kernel size, when the spectral
# product, not the transforms, dominates its cost. With **few channels** the transforms of the C + K planes
# weigh as much as the C·K products they feed, and the crossover moves out; with **many** it comes early.
#
# Both layers below are timed at kernel sizes 3 to 15 with "same" padding (Winograd runs only 3x3, depthwise
# only depthwise layers). Each algorithm runs once; those within 4x of the fastest first run are then timed in
# 5 interleaved rounds (a cell is their median), the others keep their one run (marked *: too slow to win or
# to move the crossover).

# %%
KERNELS = [3, 7, 11, 15]
SWEEPS = {"narrow: 1x16x64x64 -> 16": (16, 64), "wide: 1x64x56x56 -> 64": (64, 56)}

def sweep(channels, size):
    """algorithm -> median seconds per kernel size (nan where it does not run that size)."""
    x = rng.standard_normal((1, channels, size, size), dtype=np.float32)
    times, one_run = {n: [] for n in ALGORITHMS}, set()
    for k in KERNELS:
        w = rng.standard_normal((channels, channels, k, k), dtype=np.float32) / np.float32(np.sqrt(channels * k * k))
        p = ConvParams.from_arrays(x, w, padding=k // 2)
        calls = {n: (lambda n=n: convalgos.conv2d(x, w, padding=k // 2, algo=n)) for n, a in ALGORITHMS.items()
                 if a.supports(p)}
        once = measure.interleaved(calls, rounds=1)
        best = min(s[0] for s in once.values())
        kept = [n for n in calls if once[n][0] <= 4 * best]
        samples = measure.interleaved({n: calls[n] for n in kept}, rounds=5, warmup=0)
        for n in times:
            times[n].append(measure.median(samples[n]) if n in samples else once[n][0] if n in once else np.nan)
            if n in once and n not in samples:
                one_run.add((n, k))
    return {n: t for n, t in times.items() if not np.all(np.isnan(t))}, one_run

def crossover(times):
    """The smallest kernel size where an FFT beats every direct-sum algorithm, and the margin there."""
    sums = [n for n in ("direct", "implicit_gemm", "im2col") if n in times]
    for i, k in enumerate(KERNELS):
        fft_best = min(times["fft"][i], times["fft_tiled"][i])
        sum_best = min(times[n][i] for n in sums)
        if fft_best < sum_best:
            return k, sum_best / fft_best
    return None, None

swept = {label: sweep(*shape) for label, shape in SWEEPS.items()}
results = {label: times for label, (times, _) in swept.items()}
for label, (times, one_run) in swept.items():
    print(f"{label}, median ms per call\n{'algorithm':<20}" + "".join(f"{f'{k}x{k}':>10}" for k in KERNELS))
    for n, t in times.items():
        print(f"{n:<20}" + "".join(f"{v * 1e3:>9.2f}{'*' if (n, k) in one_run else ' '}" if not np.isnan(v)
                                   else f"{'-':>10}" for v, k in zip(t, KERNELS)))
    fastest = [min((t[i], n) for n, t in times.items() if not np.isnan(t[i]))[1] for i in range(len(KERNELS))]
    print("fastest: " + ", ".join(f"{k}x{k} {n}" for k, n in zip(KERNELS, fastest)))
    growth = {n: times[n][-1] / times[n][0] for n in ("direct", "im2col", "fft", "fft_tiled")}
    print(f"growth from 3x3 to 15x15 (the direct sum's R·S grows {15**2 / 3**2:.0f}x): "
          + ", ".join(f"{n} {g:.1f}x" for n, g in growth.items()))
    k, margin = crossover(times)
    print("an FFT beats every direct-sum algorithm "
          + (f"from {k}x{k} on ({margin:.2f}x faster there)" if k else "at no kernel size in this range") + "\n")

# %%
fig, axes = plt.subplots(1, 2, figsize=(12, 4), sharey=False)
for ax, (label, times) in zip(axes, results.items()):
    for j, (n, t) in enumerate(times.items()):
        ax.plot(KERNELS, np.array(t) * 1e3, marker="o", color=f"C{j % 10}", ls="--" if j >= 10 else "-", label=n)
    k, margin = crossover(times)
    if k:
        ax.axvline(k, color="k", ls=":", lw=1.5)
        ax.annotate(f"crossover: an FFT fastest\nfrom {k}x{k} ({margin:.2f}x)", (k, ax.get_ylim()[1]),
                    xytext=(-6, -4), textcoords="offset points", ha="right", va="top", fontsize=8)
    else:
        ax.text(0.02, 0.98, "no crossover up to 15x15", transform=ax.transAxes, va="top", fontsize=8)
    ax.set_xlabel("kernel size (k x k)"); ax.set_yscale("log"); ax.set_xticks(KERNELS)
    ax.set_title(label, fontsize=10); ax.grid(alpha=0.3)
axes[0].set_ylabel("median time per call (ms, log)")
axes[1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1))
plt.tight_layout(); plt.show()
verdicts = {label: crossover(times)[0] for label, times in results.items()}
narrow, wide = verdicts.values()
if wide and (narrow is None or narrow > wide):
    print(f"as the count predicts, the crossover comes earlier with more channels: {wide}x{wide} on the wide "
          f"layer, " + (f"{narrow}x{narrow}" if narrow else "none up to 15x15") + " on the narrow one")
else:
    print(f"the count predicted an earlier crossover on the wide layer; measured: wide {wide}, narrow {narrow} "
          f"(None: no crossover up to 15x15). On this machine now the prediction does not hold")

# %% [markdown]
# Reading it: the growth line says how far each algorithm's time follows the R·S of the arithmetic; the
# crossover line says where an FFT overtook the direct-sum algorithms. It moves with the image size, the
# channel counts and the hardware (`python -m bench.algorithms` measures 5x5, 7x7 and 11x11 layers of real
# networks), which is why a measurement per layer (benchmark mode) can beat a fixed rule. On a GPU, cuDNN's
# FFT and Winograd kernels move these crossovers again.
#
# ## 2. Fused or not: where the transformed tiles live
#
# `winograd_4x4` runs each step over the whole image (cuDNN's WINOGRAD_NONFUSED): all tiles' transforms V
# go to memory, then alpha² GEMMs, then the output transform. `winograd_fused_4x4` does the same maths one block
# of tiles at a time (cuDNN's fused WINOGRAD, NNPACK's block strategy): V and M stay in the cache, but every
# block reads all of U again. Which wins depends on the layer, and a count of the bytes that must come from
# memory says why. Both passes read U (the transformed filters, prepared once here) from memory at least once.
# The fused pass reads it again for every block of tiles when it does not fit the cache (the per-core L2,
# read from Linux's sysfs here); the non-fused pass writes V (the transformed tiles) and M (their products)
# to memory and reads them back when they outgrow the cache. So, in bytes from memory:
#
#     fused:      U × (blocks if U > L2 else 1)
#     non-fused:  U + (2 × (V + M) if V + M > L2 else 0)
#
# Both are timed on prepared weights (no filter transform), in 7 interleaved rounds.

# %%
def l2_bytes(default=1 << 20):
    """The per-core L2 cache, from Linux's sysfs (default where it cannot be read)."""
    try:
        with open("/sys/devices/system/cpu/cpu0/cache/index2/size") as f:
            text = f.read().strip()
        return int(text[:-1]) * {"K": 1 << 10, "M": 1 << 20}[text[-1]]
    except (OSError, ValueError, KeyError):
        return default

fused, plain, l2 = ALGORITHMS["winograd_fused_4x4"], ALGORITHMS["winograd_4x4"], l2_bytes()
print(f"block: {fused.block_tiles(ConvParams.from_shapes((1, 1, 4, 4), (1, 1, 3, 3)))} tiles (float32); "
      f"L2: {l2 / 2**20:.2f} MB")
for shape in [((1, 64, 112, 112), (64, 64, 3, 3)), ((1, 512, 14, 14), (512, 512, 3, 3))]:
    pf = ConvParams.from_shapes(*shape, padding=1)
    xf = rng.standard_normal(pf.in_shape, dtype=np.float32)
    wf = rng.standard_normal(pf.weight_shape, dtype=np.float32) / np.sqrt(9 * pf.C)
    forms = {a.name: a.prepare(wf, pf) for a in (fused, plain)}
    samples = measure.interleaved({a.name: (lambda a=a: convalgos.run(a, "forward", xf, None, pf,
                                                                      prepared=forms[a.name]))
                                   for a in (fused, plain)}, rounds=7)
    t = {n: measure.median(s) for n, s in samples.items()}
    blocks = -(-fused.computed_tiles(pf, "forward") // fused.block_tiles(pf))
    u = forms[fused.name].nbytes
    vm = 36 * (pf.C + pf.K) * pf.N * -(-pf.H // 4) * -(-pf.W // 4) * 4
    from_memory = {fused.name: u * (blocks if u > l2 else 1), plain.name: u + (2 * vm if vm > l2 else 0)}
    winner, predicted = min(t, key=t.get), min(from_memory, key=from_memory.get)
    print(f"{pf}: fused {t[fused.name] * 1e3:.2f} ms, non-fused {t[plain.name] * 1e3:.2f} ms -> {winner}")
    print(f"   U {u / 2**20:.1f} MB, {blocks} block(s) of tiles, V + M {vm / 2**20:.1f} MB; from memory: fused "
          f"{from_memory[fused.name] / 2**20:.1f} MB, non-fused {from_memory[plain.name] / 2**20:.1f} MB")
    verdict = "agrees" if predicted == winner else "disagrees"
    print(f"   fewer bytes from memory: {predicted}; the measurement {verdict}")

# %% [markdown]
# With C = K = 64 U is small and stays in the cache however many blocks read it, while the non-fused pass's V
# and M (a wide plane: many tiles) go through memory. With C = K = 512 on a 14x14 plane U is large, but the
# plane has few tiles: one block reads U once, as the non-fused pass does, which adds V and M. The last line
# of each layer says whether this run's timings agreed with the count. Where they do not (a noisy machine, a
# shared L3 cache that holds what the count sends to memory), the tuner still picks per layer from its own
# timings: that is the point of benchmark mode.

# %% [markdown]
# ## 3. Prepared weights: inference amortises the transform, training pays it every step
#
# Winograd multiplies transformed tiles by transformed filters, U = G w G^T; FFT multiplies spectra. Both
# transform the weight on every call unless the caller keeps the transformed form: `algorithm.prepare(w, p)`
# makes it once and `convalgos.run(..., prepared=form)` reuses it. In inference the weights never change, so
# the transform is paid once (an eval-mode `autotune.nn.Conv2d` holds it); in training they change after
# every step, so every step pays it again. Measured here on a deep 3x3 layer (VGG's conv5: 512 channels at
# 14x14, batch 1), the kind where the filter transform is large beside the tiles:

# %%
xv = rng.standard_normal((1, 512, 14, 14), dtype=np.float32)
wv = rng.standard_normal((512, 512, 3, 3), dtype=np.float32) * 0.02
pv = convalgos.ConvParams.from_arrays(xv, wv, padding=1)
yv = np.empty(pv.out_shape, np.float32)
wino, im2col = convalgos.ALGORITHMS["winograd_4x4"], convalgos.ALGORITHMS["im2col"]
form = wino.prepare(wv, pv)
y_plain, y_prepared = (convalgos.run(wino, "forward", xv, wv, pv), convalgos.run(wino, "forward", xv, None, pv,
                                                                                 prepared=form))
assert np.array_equal(y_plain, y_prepared)       # the prepared form is the same transform, kept: the same bits
calls = {"winograd_4x4 (transform each call)": lambda: convalgos.run(wino, "forward", xv, wv, pv, yv),
         "winograd_4x4 (prepared)": lambda: convalgos.run(wino, "forward", xv, None, pv, yv, prepared=form),
         "prepare alone": lambda: wino.prepare(wv, pv),
         f"a fresh {form.nbytes / 2**20:.0f} MB array, written once": lambda: np.ones(form.nbytes // 4, np.float32),
         "im2col": lambda: convalgos.run(im2col, "forward", xv, wv, pv, yv)}
t = {name: measure.median(s) for name, s in measure.interleaved(calls, 9).items()}
for name, s in t.items():
    print(f"{name:<38}{s * 1e3:8.2f} ms")
plain, prepared, prep = (t["winograd_4x4 (transform each call)"], t["winograd_4x4 (prepared)"],
                         t["prepare alone"])
print(f"\ninference (weights fixed): prepared runs at {prepared / plain:.2f}x the plain call; "
      + (f"the one-off prepare ({prep * 1e3:.1f} ms) is paid back after {prep / (plain - prepared):.1f} calls"
         if plain > prepared else "preparing does not pay on this layer here"))
fresh = t[f"a fresh {form.nbytes / 2**20:.0f} MB array, written once"]
in_call = plain - prepared
print(f"prepare alone {prep * 1e3:.1f} ms, the transform inside a call (plain - prepared) {in_call * 1e3:.1f} ms: prepare "
      f"returns a new {form.nbytes / 2**20:.0f} MB array, whose pages the OS maps on first write, while the call "
      f"transforms into a buffer it keeps; a fresh array of that size, written once, takes {fresh * 1e3:.1f} ms here"
      + (f", which is why preparing alone costs more (transform + fresh array = {(in_call + fresh) * 1e3:.1f} ms)"
         if prep > in_call else ""))
train_step = prep + prepared
print(f"training (weights change every step): prepare + prepared call = {train_step * 1e3:.2f} ms against "
      f"{plain * 1e3:.2f} ms plain: "
      + ("preparing each step costs more, so training runs the plain call" if train_step >= plain
         else "preparing each step would still pay here"))
best_inference = min(("winograd_4x4 prepared", prepared), ("im2col", t["im2col"]), key=lambda kv: kv[1])
best_training = min(("winograd_4x4 plain", plain), ("im2col", t["im2col"]), key=lambda kv: kv[1])
print(f"fastest here for inference: {best_inference[0]}; for a training step's forward pass: "
      f"{best_training[0]}" + (" (the choice flips with the mode)" if best_inference[0].split()[0]
                               != best_training[0].split()[0] else ""))

fig, ax = plt.subplots(figsize=(7, 3))
ax.barh(list(t), [s * 1e3 for s in t.values()])
ax.invert_yaxis(); ax.set_xlabel("median time per call (ms, 9 interleaved rounds)")
ax.set_title("VGG conv5 (512->512, 14x14, batch 1), forward pass", fontsize=10)
plt.tight_layout(); plt.show()

# %% [markdown]
# This is why the tuner keys an eval-mode (prepared) forward pass apart from a training one, and shows the
# prepare cost apart from the times in the table: the same layer can want a different algorithm in each mode.
