# %% [markdown]
# # 1. The convolution algorithms
#
# A 2-D convolution layer (PyTorch `conv2d` semantics: cross-correlation, NCHW input, KCRS weight) can be
# computed in many ways that give the same answer up to rounding. cuDNN ships several of them and
# `torch.backends.cudnn.benchmark = True` picks the fastest per layer. This notebook opens the box: the
# algorithms of `convalgos`, one section each, with
#
# - the idea, read from the module docstring, and the key code, read from the source (`inspect`);
# - the arithmetic it really does (`flops`) and the extra memory it needs (`workspace_bytes`) for a sample layer;
# - its measured error against a float64 reference.
#
# Then the Winograd matrices are generated in exact rational arithmetic, the FFT's crossover with kernel size
# is measured, and the time of every algorithm is plotted across kernel sizes.
#
# Every number below is computed when the notebook runs, so it describes *this* machine, and every
# conclusion printed is computed from the numbers printed beside it. Sizes are small so the notebook runs in
# about a minute on 2 CPU cores; `python -m bench.algorithms` times every algorithm on real
# VGG/ResNet/MobileNet layers (a few minutes). Times are taken the way the autotuner takes them
# (`autotune.measure`: interleaved rounds, the median).

# %%
import inspect, os
import convalgos    # first: it sets the thread variables that numpy's OpenBLAS reads when it loads
import numpy as np
import matplotlib.pyplot as plt
from convalgos import ALGORITHMS, PASSES, ConvParams, reference
from convalgos.depthwise import cpu as depthwise
from convalgos.direct import cpu as direct
from convalgos.fft import tiled as fft_tiled, whole as fft
from convalgos.im2col import cpu as im2col
from convalgos.implicit_gemm import cpu as implicit_gemm
from convalgos.winograd import cooktoom, cpu as winograd
from autotune import measure


def show_doc(module, paragraphs=2):
    """The first paragraphs of a module's docstring."""
    print("\n\n".join(inspect.getdoc(module).split("\n\n")[:paragraphs]))


print("algorithms:", list(ALGORITHMS))
load = os.getloadavg()[0]
print(f"this machine: {os.cpu_count()} cores, load average {load:.1f}"
      + (" (above the core count: other processes share the cores, timings below are disturbed)"
         if load > os.cpu_count() else ""))

# %% [markdown]
# ## Three passes, not one
#
# Training runs three convolutions per layer, and each is a pass of its own for the algorithms:
#
# - `forward`: y = conv(x, w);
# - `backward_data`: dx, the input's gradient, from dy and w (`convalgos.conv2d_input`, torch.nn.grad's name);
# - `backward_filter`: dw, the weight's gradient, from x and dy (`convalgos.conv2d_weight`).
#
# At stride 1 backward-data is a forward convolution of dy with the flipped, transposed kernel, and
# backward-filter is a forward convolution of x with dy as the kernel; each algorithm computes each pass in
# its own way (its docstring says how), and answers `supports`, `workspace_bytes` and `flops` per pass.
# The autotuner tunes each pass under its own key (notebook 6 trains a network and shows the passes of one
# layer choosing differently). The table below says which pass each algorithm implements, and whether it
# supports each pass of a 3x3 layer and of a depthwise layer (one filter per channel, `groups == C`):

# %%
dense = ConvParams.from_shapes((8, 32, 28, 28), (32, 32, 3, 3), padding=1)
dwise = ConvParams.from_shapes((8, 32, 28, 28), (32, 1, 3, 3), padding=1, groups=32)
print(f"{'algorithm':<14}" + "".join(f"{op:>17}" for op in PASSES) + "   (dense 3x3 / depthwise 3x3)")
for name, algo in ALGORITHMS.items():
    marks = ["/".join("yes" if algo.supports(p, op) else "no" for p in (dense, dwise)) for op in PASSES]
    print(f"{name:<14}" + "".join(f"{m:>17}" for m in marks))
print("\nwhy depthwise refuses the dense layer:", ALGORITHMS["depthwise"].supports(dense).reason)

# %% [markdown]
# ## The sample layers
#
# The **seed layer** of the articles this project started from is N=64, C=3, 256x256, K=64, 3x3, padding 1.
# Its FLOP and workspace figures are formulas, so we can print them at full size. For the error and timing
# measurements we use a layer with more input channels (errors grow with the number of terms summed per
# output), small enough to run in a fraction of a second.

# %%
seed = ConvParams.from_shapes((64, 3, 256, 256), (64, 3, 3, 3), padding=1)
print("seed layer:", seed, "| output", seed.out_shape, f"| direct-equivalent {seed.flops / 1e9:.1f} GFLOP")

rng = np.random.default_rng(0)
x = rng.standard_normal((1, 64, 32, 32), dtype=np.float32)
w = rng.standard_normal((64, 64, 3, 3), dtype=np.float32)
p = ConvParams.from_arrays(x, w, padding=1)
ref = reference.conv2d(x.astype(np.float64), w.astype(np.float64), padding=1)
print("measured layer:", p)

# %%
print(f"{'algorithm':<14}{'FLOPs/direct':>13}{'workspace MiB':>15}   {'error (f32)':>16}{'tolerance':>11}")
print(f"{'':<14}{'(seed layer)':>13}{'(seed layer)':>15}   {'(measured layer)':>16}")
refused = {}
for name, algo in ALGORITHMS.items():
    if not algo.supports(seed):
        refused[name] = algo.supports(seed).reason
        continue
    err = reference.normwise_error(convalgos.conv2d(x, w, padding=1, algo=name), ref)
    print(f"{name:<14}{algo.flops(seed) / seed.flops:>13.2f}{algo.workspace_bytes(seed) / 2**20:>15.1f}   "
          f"{err:>16.1e}{algo.tolerance_of('forward', 'float32'):>11.0e}")
for name, reason in refused.items():
    print(f"{name:<14} does not run this layer: {reason}")

# %% [markdown]
# `FLOPs/direct` is the arithmetic the algorithm really does divided by the direct sum's
# 2·N·K·C·R·S·Ho·Wo: Winograd and FFT trade multiplications for transforms, and for C=3 the transforms weigh
# a lot against the few multiplications they save, which is why the ratios for this narrow first layer are
# not the textbook ones. The error column is the normwise error max|y − ref| / max|ref| against the float64
# reference; an algorithm must stay within its tolerance (the last column), which the autotuner checks before
# letting a candidate win.
#
# ## direct
#
# The defining sum as a Numba loop nest, parallel over blocks of output rows. Padding and stride are handled
# by copying the input once into padded polyphase planes, so every tap becomes one flat, vectorisable pass.
# Its inner block keeps 4 channels x 2 vectors of outputs in eight vector registers across every tap
# (`convalgos.kernels.simd` makes a vector register a Numba value): per tap, two loads and four broadcasts feed eight
# fused multiply-adds, so the loop is bound by arithmetic, not by memory. On a CPU with AVX-512 (32 registers
# of 512 bits) the block is 8 channels x 2 vectors of 16 outputs: sixteen accumulators. This register blocking
# is what took `direct` from about 35 to 150-200 GFLOP/s on CIFAR-sized layers.

# %%
from convalgos.kernels import blocks
show_doc(direct)
print()
print(inspect.getsource(blocks.four_channels.py_func))

# %% [markdown]
# ## depthwise and implicit GEMM: the direct sum, specialised
#
# Two more algorithms compute the defining sum without a transform. `depthwise` serves only layers with one
# filter per channel (MobileNet's), working plane by plane; `implicit_gemm` does im2col's matrix products
# (next section) without ever building the patch matrix, so it needs **no workspace** in any pass: like
# cuDNN's implicit GEMM, it is the algorithm that still runs when the workspace limit is zero.

# %%
show_doc(depthwise, 1)
print()
show_doc(implicit_gemm, 1)
print()
print("implicit_gemm workspace per pass on the seed layer (bytes):",
      {op: ALGORITHMS["implicit_gemm"].workspace_bytes(seed, op) for op in PASSES})

# %% [markdown]
# ## im2col + GEMM
#
# Unfold every receptive field into a column of a patch matrix (C·R·S rows, Ho·Wo columns), then one matrix
# multiply by the (K, C·R·S) weight matrix. The arithmetic equals direct's, but it runs in BLAS, tuned to the
# cache hierarchy; the price is the patch matrix, R·S times the input.

# %%
show_doc(im2col)
print()
print(inspect.getsource(im2col.Im2col.forward))

# %% [markdown]
# ## FFT
#
# Convolution is a pointwise product in the frequency domain: transform the image and the kernel, multiply
# (summing over input channels, a batched complex GEMM), transform back, crop. The cost barely depends on the
# kernel size, so FFT can win for large kernels (measured below).

# %%
show_doc(fft, 3)
print()
print(inspect.getsource(fft.FFT.forward_chunk))

# %% [markdown]
# ## Tiled FFT (overlap-save)
#
# The same, on fixed tiles of the image instead of the whole image: far less workspace, and short transforms
# that stay in cache.

# %%
show_doc(fft_tiled)
print()
print(inspect.getsource(fft_tiled.cheapest_tile_plan))

# %% [markdown]
# ## Winograd F(m×m, 3×3)
#
# Minimal filtering: m×m outputs of a 3×3 filter from an (m+2)×(m+2) input tile with (m+2)² multiplications
# instead of 9m². Tiles are transformed (Bᵀ d B), the filter once (G g Gᵀ), multiplied elementwise (as one
# GEMM over channels per tile position), and transformed back (Aᵀ … A).

# %%
show_doc(winograd)
print()
print(inspect.getsource(winograd.Winograd.forward))

# %% [markdown]
# ### The matrices, generated exactly
#
# `convalgos.winograd.cooktoom` builds Aᵀ, G and Bᵀ for any F(m, r) from interpolation points, in
# `fractions.Fraction` arithmetic; nothing is typed in. Here they are for F(2,3), F(4,3) and F(6,3), with the
# identity they must satisfy checked exactly.

# %%
def show_matrix(name, rows):
    cells = [[str(v) for v in row] for row in rows]
    width = max(len(c) for row in cells for c in row)
    print(f"{name}:")
    for row in cells:
        print("   " + " ".join(c.rjust(width) for c in row))

for m in (2, 4, 6):
    mats = cooktoom.cook_toom(m, 3)
    print(f"F({m},3): alpha = {mats.alpha}, points {[str(a) for a in mats.points]} and infinity; "
          f"identity holds exactly: {cooktoom.identity_holds(mats)}")
    for name in ("AT", "G", "BT"):
        show_matrix(name, getattr(mats, name))
    print()

# %% [markdown]
# The entries grow with the tile size (larger points, larger coefficients), and the transforms then add and
# cancel larger terms in floating point. Fewer multiplications may cost accuracy; measured on a wide layer
# (many channels summed), in float32, over a few random draws (the last line says whether the error grew
# with the tile on this run):

# %%
multiplies, errors = {}, {}
xw = rng.standard_normal((1, 128, 24, 24), dtype=np.float32)
for trial in range(3):
    ww = rng.standard_normal((32, 128, 3, 3), dtype=np.float32)
    refw = reference.conv2d(xw.astype(np.float64), ww.astype(np.float64), padding=1)
    for name in ("direct", "winograd_2x2", "winograd_4x4", "winograd_6x6"):
        y = convalgos.conv2d(xw, ww, padding=1, algo=name)
        errors.setdefault(name, []).append(reference.normwise_error(y, refw))
for name, errs in errors.items():
    algo = ALGORITHMS[name]
    per_out = (algo.elementwise_multiplies_per_tile / algo.m**2) if name != "direct" else 9
    print(f"{name:<14} multiplies per output {per_out:5.2f}   normwise error (median of 3) {np.median(errs):.1e}")
medians = [np.median(errors[n]) for n in ("winograd_2x2", "winograd_4x4", "winograd_6x6")]
growing = all(a < b for a, b in zip(medians, medians[1:]))
print("\nthe error grows with the tile (2x2 < 4x4 < 6x6):", growing,
      f"| 6x6 against direct: {medians[-1] / np.median(errors['direct']):.0f}x the error")

# %% [markdown]
# ### Fused or not: where the transformed tiles live
#
# `winograd_4x4` runs each step over the whole image (cuDNN's WINOGRAD_NONFUSED): all tiles' transforms V
# go to memory, then alpha² GEMMs, then the output transform. `winograd_fused_4x4` does the same maths one block
# of tiles at a time (cuDNN's fused WINOGRAD, NNPACK's block strategy): V and M stay in the cache, but every
# block reads all of U again. Which wins depends on the layer, and a count of the bytes that must come from
# memory says why: the fused pass re-reads U from the cache when it fits (the per-core L2, read from Linux's
# sysfs here), else from memory once per block; the non-fused pass sends V and M through memory when they
# outgrow the cache. Both are timed on prepared weights (no filter transform), in interleaved rounds.

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
    blocks = fused.computed_tiles(pf, "forward") // fused.block_tiles(pf)
    u = forms[fused.name].nbytes
    vm = 36 * (pf.C + pf.K) * pf.N * -(-pf.H // 4) * -(-pf.W // 4) * 4
    from_memory = {fused.name: u if u <= l2 else u * blocks, plain.name: vm if vm > l2 else 0}
    winner, predicted = min(t, key=t.get), min(from_memory, key=from_memory.get)
    print(f"{pf}: fused {t[fused.name] * 1e3:.2f} ms, non-fused {t[plain.name] * 1e3:.2f} ms -> {winner}")
    print(f"   from memory: fused {from_memory[fused.name] / 2**20:.1f} MB (U {u / 2**20:.1f} MB, {blocks} blocks), "
          f"non-fused {from_memory[plain.name] / 2**20:.1f} MB (V and M {vm / 2**20:.1f} MB)")
    verdict = "agrees" if predicted == winner else "disagrees"
    print(f"   fewer bytes from memory: {predicted}; the measurement {verdict}")

# %% [markdown]
# A small U (C = K = 64: 0.6 MB) stays in the cache however many blocks read it, while the non-fused pass's V
# and M (tens of MB on a wide plane) go through memory: the fused pass should win. A large U (C = K = 512: 36
# MB) is read from memory by every block, and with few tiles V and M are small: the non-fused pass should
# win. The last line of each layer says whether this run's timings agreed. When they do not (a noisy machine,
# a cache that changes the balance), the tuner still picks per layer from its own timings: that is the point
# of benchmark mode.

# %% [markdown]
# ## FFT's crossover with kernel size
#
# Direct and im2col do R·S multiply-adds per output and input channel; FFT's cost is nearly independent of
# R·S. So there may be a kernel size above which FFT is faster. We time the algorithms on a 64×64 layer with
# C = K = 16 and "same" padding for kernel sizes 3 to 11 (Winograd only runs 3×3, depthwise only depthwise
# layers), in 5 interleaved rounds after a warm-up, and keep each median.

# %%
kernels = [3, 5, 7, 9, 11]
names = [n for n in ALGORITHMS]
timings = {n: [] for n in names}
xk = rng.standard_normal((1, 16, 64, 64), dtype=np.float32)
for k in kernels:
    wk = rng.standard_normal((16, 16, k, k), dtype=np.float32)
    pk = ConvParams.from_arrays(xk, wk, padding=k // 2)
    runnable = [n for n in names if ALGORITHMS[n].supports(pk)]
    samples = measure.interleaved({n: (lambda n=n: convalgos.conv2d(xk, wk, padding=k // 2, algo=n))
                                   for n in runnable}, rounds=5)
    for n in names:
        timings[n].append(measure.median(samples[n]) if n in samples else np.nan)
names = [n for n in names if not np.all(np.isnan(timings[n]))]      # drop the ones that ran no kernel size

print(f"{'kernel':<8}" + "".join(f"{n:>15}" for n in names) + "   fastest")
for i, k in enumerate(kernels):
    row = {n: timings[n][i] for n in names}
    best = min((t, n) for n, t in row.items() if not np.isnan(t))[1]
    print(f"{k}x{k:<6}" + "".join(f"{row[n] * 1e3:>13.2f}ms" if not np.isnan(row[n]) else f"{'-':>15}"
                                   for n in names) + f"   {best}")

print(f"\ngrowth from 3x3 to 11x11 (the k^2 of the direct sum is {11**2 / 3**2:.1f}x):")
for n in names:
    if not np.isnan(timings[n][0]) and not np.isnan(timings[n][-1]):
        print(f"  {n:<14}{timings[n][-1] / timings[n][0]:6.1f}x")
fft_best = [min(timings["fft"][i], timings["fft_tiled"][i]) for i in range(len(kernels))]
sums = ("direct", "implicit_gemm", "im2col")
sum_best = [min(timings[n][i] for n in sums) for i in range(len(kernels))]
crossing = next((k for k, f, g in zip(kernels, fft_best, sum_best) if f < g), None)
print("smallest kernel where an FFT beats direct, implicit_gemm and im2col here:", crossing or "none in this range")

# %%
fig, ax = plt.subplots(figsize=(7, 4))
for n in names:
    ax.plot(kernels, np.array(timings[n]) * 1e3, marker="o", label=n)
ax.set_xlabel("kernel size (k x k)"); ax.set_ylabel("median time per call (ms)"); ax.set_yscale("log")
ax.set_xticks(kernels); ax.set_title("1x16x64x64 -> 16 channels, 'same' padding")
ax.legend(fontsize=8); ax.grid(alpha=0.3)
plt.show()

# %% [markdown]
# Reading it: the growth column says how far each algorithm's time follows the k² of the arithmetic, and the
# crossover line says where (if anywhere in this range) an FFT overtook the direct-sum algorithms on this
# machine; on a loaded machine noise can move it (`python -m bench.algorithms` measures the 5x5, 7x7 and
# 11x11 layers more carefully). It moves with the image size, the channel counts and the hardware, which is
# why a runtime measurement (benchmark mode, notebook 2) can beat a fixed rule. On a GPU, cuDNN's FFT and
# Winograd kernels shift these crossovers again (`python -m bench.gpu_check` on a CUDA machine).
