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
# Then the Winograd matrices are generated in exact rational arithmetic, and their error is measured as the
# tile grows.
#
# Every number below is computed when the notebook runs, so it describes *this* machine, and every
# conclusion printed is computed from the numbers printed beside it. Sizes are small so the notebook runs in
# seconds on 2 CPU cores; `python -m bench.algorithms` times every algorithm on real VGG/ResNet/MobileNet
# layers (a few minutes), and notebook 9 times them where the winner changes.

# %%
import inspect, os
import convalgos    # first: it sets the thread variables that numpy's OpenBLAS reads when it loads
import numpy as np
from convalgos import ALGORITHMS, PASSES, ConvParams, reference
from convalgos.depthwise import cpu as depthwise
from convalgos.direct import cpu as direct
from convalgos.fft import tiled as fft_tiled, whole as fft
from convalgos.im2col import cpu as im2col
from convalgos.implicit_gemm import cpu as implicit_gemm
from convalgos.winograd import cooktoom, cpu as winograd


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
print(f"{'algorithm':<20}" + "".join(f"{op:>17}" for op in PASSES) + "   (dense 3x3 / depthwise 3x3)")
for name, algo in ALGORITHMS.items():
    marks = ["/".join("yes" if algo.supports(p, op) else "no" for p in (dense, dwise)) for op in PASSES]
    print(f"{name:<20}" + "".join(f"{m:>17}" for m in marks))
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
print(f"{'algorithm':<20}{'FLOPs/direct':>13}{'workspace MiB':>15}   {'error (f32)':>16}{'tolerance':>11}")
print(f"{'':<20}{'(seed layer)':>13}{'(seed layer)':>15}   {'(measured layer)':>16}")
refused = {}
for name, algo in ALGORITHMS.items():
    if not algo.supports(seed):
        refused[name] = algo.supports(seed).reason
        continue
    err = reference.normwise_error(convalgos.conv2d(x, w, padding=1, algo=name), ref)
    print(f"{name:<20}{algo.flops(seed) / seed.flops:>13.2f}{algo.workspace_bytes(seed) / 2**20:>15.1f}   "
          f"{err:>16.1e}{algo.tolerance_of('forward', 'float32'):>11.0e}")
for name, reason in refused.items():
    print(f"{name:<20} does not run this layer: {reason}")

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
# kernel size, so FFT can win for large kernels (measured in notebook 9).

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
# Which of these algorithms wins a layer is a question of measurement, not of the FLOP column alone:
# notebook 2 shows benchmark mode choosing per layer, and notebook 9 measures three places where the winner
# changes (FFT's crossover with kernel size, Winograd fused or not, prepared weights in inference), each
# beside the count that explains it.
