# %% [markdown]
# # 1. The convolution algorithms
#
# A 2-D convolution layer (PyTorch `conv2d` semantics: cross-correlation, NCHW input, KCRS weight) can be
# computed in many ways that give the same answer up to rounding. cuDNN ships several of them and
# `torch.backends.cudnn.benchmark = True` picks the fastest per layer. This notebook opens the box:
#
# - the definition, as a plain loop nest, and the size of its output;
# - the words the rest of the course uses;
# - the eleven CPU algorithms of `convalgos`, one section per family: the idea, the arithmetic it really does
#   (`flops`), the extra memory it needs (`workspace_bytes`) and its measured error against a float64
#   reference; im2col drawn as a picture, Winograd's F(2,3) worked by hand.
#
# Every number below is computed when the notebook runs, and every conclusion printed is computed from the
# numbers printed beside it. Sizes are small, to keep the notebook short; which algorithm is *fastest*
# is the subject of notebooks 2 and 9.

# %%
import inspect, time
import machine      # notebooks/machine.py: the header every notebook prints
machine.describe()
import convalgos    # first: it sets the thread variables that numpy's OpenBLAS reads when it loads
import numpy as np
import matplotlib.pyplot as plt
from fractions import Fraction
from convalgos import ALGORITHMS, PASSES, ConvParams, reference
from convalgos.fft import tiled as fft_tiled, whole as fft
from convalgos.kernels import blocks, simd
from convalgos.winograd import cooktoom

rng = np.random.default_rng(0)

# %% [markdown]
# ## The definition, as a loop nest
#
# A layer takes an input x of shape (N, C, H, W) (N images of C channels) and a weight w of shape
# (K, C, R, S) (K filters of R x S taps over the C channels), and computes, for every image n, output
# channel k and output pixel (i, j):
#
#     y[n, k, i, j] = sum over c < C, r < R, s < S of  x[n, c, i*stride + r*dilation - pad, j*stride + s*dilation - pad] * w[k, c, r, s]
#
# with x read as zero outside the image (the padding). Written as loops, in plain Python, it is seven nested
# loops: four over the output, three over the sum. It costs one multiply and one add per term, so
# **2·N·K·C·R·S·Ho·Wo FLOPs**: the "direct-equivalent" count every algorithm is compared against.

# %%
def naive_conv2d(x, w, stride=1, pad=0, dilation=1):
    """The definition, one multiply-add at a time (pure Python: for teaching only; the cell prints its speed)."""
    N, C, H, W = x.shape
    K, _, R, S = w.shape
    Ho = (H + 2 * pad - dilation * (R - 1) - 1) // stride + 1
    Wo = (W + 2 * pad - dilation * (S - 1) - 1) // stride + 1
    y = np.zeros((N, K, Ho, Wo))
    for n in range(N):
        for k in range(K):
            for i in range(Ho):
                for j in range(Wo):
                    total = 0.0
                    for c in range(C):
                        for r in range(R):
                            for s in range(S):
                                row, col = i * stride + r * dilation - pad, j * stride + s * dilation - pad
                                if 0 <= row < H and 0 <= col < W:            # outside: the zero padding
                                    total += x[n, c, row, col] * w[k, c, r, s]
                    y[n, k, i, j] = total
    return y

xs, ws = rng.standard_normal((1, 2, 6, 6)), rng.standard_normal((3, 2, 3, 3))
for stride, pad, dilation in [(1, 1, 1), (2, 1, 1), (1, 2, 2)]:
    t = time.perf_counter()
    y_naive = naive_conv2d(xs, ws, stride, pad, dilation)
    seconds = time.perf_counter() - t
    y_ref = reference.conv2d(xs, ws, stride=stride, padding=pad, dilation=dilation)
    print(f"stride {stride}, padding {pad}, dilation {dilation}: output {y_naive.shape}, "
          f"{y_naive.size * 2 * 3 * 3} terms in {seconds * 1e3:.1f} ms ({seconds / (y_naive.size * 18) * 1e9:.0f} ns a term); "
          f"equal to convalgos.reference (float64): {np.allclose(y_naive, y_ref, rtol=1e-12, atol=1e-12)}")
assert np.allclose(y_naive, y_ref, rtol=1e-12, atol=1e-12)

# %% [markdown]
# **The output size.** Output pixel i reads input rows i·stride − pad_top … i·stride − pad_top +
# dilation·(R − 1); the last one must lie inside the padded input, so
#
#     Ho = floor((H + pad_top + pad_bottom − dilation·(R − 1) − 1) / stride) + 1
#
# and the same for Wo with W, S and the left and right padding. A 3x3 layer with padding 1 and stride 1 keeps
# the size ("same" padding); stride 2 halves it, rounding up. The formula against `ConvParams.out_hw` on a few
# layers, an asymmetric padding among them:

# %%
def out_size(H, R, pad_before, pad_after, stride, dilation):
    return (H + pad_before + pad_after - dilation * (R - 1) - 1) // stride + 1

layers = [((1, 3, 224, 224), (64, 3, 7, 7), dict(stride=2, padding=3)),        # ResNet's first layer
          ((1, 64, 56, 56), (64, 64, 3, 3), dict(padding=1)),                  # a "same" 3x3
          ((1, 64, 56, 56), (128, 64, 1, 1), dict(stride=2)),                  # a strided 1x1 shortcut
          ((1, 8, 33, 33), (8, 8, 3, 3), dict(padding=2, dilation=2)),         # dilated
          ((1, 8, 32, 32), (8, 8, 3, 3), dict(stride=2, padding=((0, 1), (0, 1))))]   # TF-style "same"
for x_shape, w_shape, kw in layers:
    p = ConvParams.from_shapes(x_shape, w_shape, **kw)
    (top, bottom), (left, right) = p.padding
    mine = (out_size(p.H, p.R, top, bottom, p.stride[0], p.dilation[0]),
            out_size(p.W, p.S, left, right, p.stride[1], p.dilation[1]))
    print(f"{str(p):<44} formula {mine}, ConvParams {p.out_hw}")
    assert mine == p.out_hw

# %% [markdown]
# ## Words used in this course
#
# - **pass**: one of the three convolutions of a layer in training (forward, backward-data, backward-filter;
#   next section).
# - **workspace**: memory an algorithm needs beyond the input, weight and output (a patch matrix, spectra,
#   transformed tiles). cuDNN asks for it as a separate buffer, and a workspace limit excludes the algorithms
#   that need more.
# - **normwise error**: max|y − ref| / max|ref|, the largest error of any output element relative to the largest
#   output, against a float64 reference. Every algorithm has a tolerance on it per dtype; the autotuner checks
#   it before a candidate may win.
# - **lanes**: the elements one SIMD vector register holds and one instruction processes at once: 16 float32
#   in a 512-bit register (AVX-512), 8 in a 256-bit one (AVX2). Fast kernels compute a whole register of
#   outputs per instruction.
# - **polyphase**: splitting an image into its phases, the pixels whose row and column have the same remainder
#   modulo the stride (four phases at stride 2). A strided convolution becomes a sum of stride-1 convolutions,
#   one per phase, each of which reads consecutive memory.
# - **overlap-save**: computing a long convolution from short FFTs on overlapping tiles of the input, keeping
#   from each tile only the outputs that the tile's circular wrap-around did not spoil.
# - **Cook-Toom**: the construction behind Winograd's minimal filtering: evaluate the input and the filter
#   polynomials at a few points, multiply the values (one multiplication per point), interpolate back. The
#   choice of points sets the size of the transform matrices' entries, and so the rounding error.
# - **tile**: a small block of output (Winograd's m x m, tiled FFT's T x T) computed as one unit.
#
# ## The algorithms, and the three passes
#
# Eleven CPU algorithms, each a class in `convalgos` with the same questions (`supports`, `workspace_bytes`,
# `flops`, `tolerance_of`). The first paragraph of each one's module docstring says what it is:

# %%
import importlib
for name, algo in ALGORITHMS.items():
    doc = inspect.getdoc(importlib.import_module(type(algo).__module__)).split("\n\n")[0].replace("\n", " ")
    print(f"{name:<20}{doc[:150] + (' ...' if len(doc) > 150 else '')}")

# %% [markdown]
# Training runs three convolutions per layer, and each is a pass of its own for the algorithms:
#
# - `forward`: y = conv(x, w);
# - `backward_data`: dx, the input's gradient, from dy and w (`convalgos.conv2d_input`, torch.nn.grad's name);
# - `backward_filter`: dw, the weight's gradient, from x and dy (`convalgos.conv2d_weight`).
#
# At stride 1 backward-data is a forward convolution of dy with the flipped, transposed kernel, and
# backward-filter is a forward convolution of x with dy as the kernel; each algorithm computes each pass in
# its own way (its docstring says how). The autotuner tunes each pass under its own key (notebook 6). Which
# pass each algorithm implements, for a 3x3 layer and a depthwise one (one filter per channel, `groups == C`):

# %%
dense = ConvParams.from_shapes((8, 32, 28, 28), (32, 32, 3, 3), padding=1)
dwise = ConvParams.from_shapes((8, 32, 28, 28), (32, 1, 3, 3), padding=1, groups=32)
print(f"{'algorithm':<20}" + "".join(f"{op:>17}" for op in PASSES) + "   (dense 3x3 / depthwise 3x3)")
for name, algo in ALGORITHMS.items():
    marks = ["/".join("yes" if algo.supports(p, op) else "no" for p in (dense, dwise)) for op in PASSES]
    print(f"{name:<20}" + "".join(f"{m:>17}" for m in marks))
print("\nwhy depthwise refuses the dense layer:", ALGORITHMS["depthwise"].supports(dense).reason)
print("why direct_channels has no backward_filter:", ALGORITHMS["direct_channels"].supports(dense, "backward_filter").reason)

# %% [markdown]
# ## Arithmetic, workspace and error
#
# The **seed layer** of the articles this project started from is N=64, C=3, 256x256, K=64, 3x3, padding 1.
# Its FLOP and workspace figures are formulas, so we print them at full size. The error is measured on a
# layer with more input channels (errors grow with the number of terms summed per output), kept small.

# %%
seed = ConvParams.from_shapes((64, 3, 256, 256), (64, 3, 3, 3), padding=1)
seed_input_mib = np.prod(seed.in_shape) * 4 / 2**20
print(f"seed layer: {seed} | output {seed.out_shape} | direct-equivalent {seed.flops / 1e9:.1f} GFLOP | "
      f"input {seed_input_mib:.1f} MiB")

x = rng.standard_normal((1, 64, 32, 32), dtype=np.float32)
w = rng.standard_normal((64, 64, 3, 3), dtype=np.float32)
p = ConvParams.from_arrays(x, w, padding=1)
ref = reference.conv2d(x.astype(np.float64), w.astype(np.float64), padding=1)
print("measured layer:", p)

print(f"\n{'algorithm':<20}{'FLOPs/direct':>13}{'workspace MiB':>15}   {'error (f32)':>16}{'tolerance':>11}")
print(f"{'':<20}{'(seed layer)':>13}{'(seed layer)':>15}   {'(measured layer)':>16}")
refused, errors = {}, {}
for name, algo in ALGORITHMS.items():
    if not algo.supports(seed):
        refused[name] = algo.supports(seed).reason
        continue
    errors[name] = reference.normwise_error(convalgos.conv2d(x, w, padding=1, algo=name), ref)
    print(f"{name:<20}{algo.flops(seed) / seed.flops:>13.2f}{algo.workspace_bytes(seed) / 2**20:>15.1f}   "
          f"{errors[name]:>16.1e}{algo.tolerance_of('forward', 'float32'):>11.0e}")
for name, reason in refused.items():
    print(f"{name:<20} does not run this layer: {reason}")
assert all(errors[n] <= ALGORITHMS[n].tolerance_of("forward", "float32") for n in errors)

# %% [markdown]
# `FLOPs/direct` is the arithmetic the algorithm really does divided by the direct sum's 2·N·K·C·R·S·Ho·Wo:
# Winograd and FFT trade multiplications for transforms, and for C=3 the transforms weigh a lot against the
# few multiplications they save, which is why the ratios for this narrow first layer are not the textbook
# ones. Every error is within its tolerance (the cell checks it).
#
# ## direct and direct_channels: the loop nest, made fast
#
# `direct` computes the definition above, with the loops reordered for the hardware:
#
# 1. the input is copied once into padded **polyphase** planes, so every tap (c, r, s) reads consecutive
#    memory whatever the stride;
# 2. the innermost loop does not compute one output: it computes a vector register of outputs (`lanes` of
#    them) with one fused multiply-add per tap;
# 3. **register blocking**: a block of output channels (4, or 8 where the CPU has 32 vector registers) x 2
#    vectors of outputs is kept in registers over all C·R·S taps. Per tap, 2 vector loads of x and one
#    broadcast of w per channel feed 2 multiply-adds per channel: each loaded value is used several times, so
#    the loop is bound by arithmetic, not by memory.
#
# That is the whole idea; the code is `four_channels` and `eight_channels` in `convalgos/kernels/blocks.py` (on
# `convalgos.kernels.simd`, which makes a vector register a Numba value). `direct_channels` does the same sum
# with the *output channels* in the lanes instead of the output pixels (as oneDNN's blocked kernels do), which
# suits small planes and strided layers. This machine's registers, and what the two ran at on the measured layer:

# %%
print(f"vector register: {simd.REGISTER_BYTES * 8} bits = {simd.REGISTER_BYTES // 4} float32 lanes; "
      f"{simd.REGISTERS} registers")
print(f"register block here: {blocks.BLOCK} output channels x 2 vectors = {2 * blocks.BLOCK} accumulators")
from autotune import measure
runs = measure.interleaved({n: (lambda n=n: convalgos.conv2d(x, w, padding=1, algo=n))
                            for n in ("direct", "direct_channels")}, rounds=7)
for name, s in runs.items():
    t = measure.median(s)
    print(f"{name:<16} {t * 1e3:6.3f} ms per call (median of 7) = {ALGORITHMS[name].flops(p) / t / 1e9:5.1f} "
          f"GFLOP/s of its own arithmetic on {p}")

# %% [markdown]
# ## depthwise and implicit GEMM: the direct sum, specialised
#
# Two more algorithms compute the defining sum without a transform. `depthwise` serves only layers with one
# filter per channel (MobileNet's), working plane by plane; `implicit_gemm` does im2col's matrix products
# (next section) without ever building the patch matrix, so it needs **no workspace** in any pass: like
# cuDNN's implicit GEMM, it is the algorithm that still runs when the workspace limit is zero.

# %%
print("implicit_gemm workspace per pass on the seed layer (bytes):",
      {op: ALGORITHMS["implicit_gemm"].workspace_bytes(seed, op) for op in PASSES})

# %% [markdown]
# ## im2col + GEMM
#
# Unfold every receptive field into a column of a **patch matrix** (C·R·S rows, one column per output pixel),
# then one matrix multiply by the (K, C·R·S) weight matrix gives the (K, Ho·Wo) output. The picture, in the
# style of Chellapilla, Puri and Simard (2006, "High performance convolutional neural networks for document
# processing", Fig. 2), for 2 input channels of 3x3, 2 filters of 2x2 and a 2x2 output. The numbers are the
# input's elements (channel 0: 1-9, channel 1: 11-19); the first receptive field and its column are outlined:

# %%
C_, H_, R_, K_ = 2, 3, 2, 2
Ho_ = H_ - R_ + 1
xi = np.array([np.arange(1, 10).reshape(3, 3), np.arange(11, 20).reshape(3, 3)], dtype=np.float64)
wi = rng.integers(-2, 3, (K_, C_, R_, R_)).astype(np.float64)
patches = np.array([[xi[c, i + r, j + s] for i in range(Ho_) for j in range(Ho_)]
                    for c in range(C_) for r in range(R_) for s in range(R_)])      # (C·R·S, Ho·Wo)
y_gemm = (wi.reshape(K_, -1) @ patches).reshape(1, K_, Ho_, Ho_)
print("W (K x C·R·S) @ P (C·R·S x Ho·Wo) equals the convolution:",
      np.array_equal(y_gemm, reference.conv2d(xi[None], wi)))

def grid(ax, values, x0, y0, colours, outline=None, fmt="{:.0f}"):
    """Draw a matrix of numbers as coloured cells, top-left at (x0, y0); outline (row, col, rows, cols)."""
    for (i, j), v in np.ndenumerate(values):
        ax.add_patch(plt.Rectangle((x0 + j, y0 - i - 1), 1, 1, fc=colours[i, j], ec="white"))
        ax.text(x0 + j + 0.5, y0 - i - 0.5, fmt.format(v), ha="center", va="center", fontsize=8)
    if outline:
        i, j, h, w_ = outline
        ax.add_patch(plt.Rectangle((x0 + j, y0 - i - h), w_, h, fill=False, ec="k", lw=2))

tint = {0: "#9ecae1", 1: "#fdae6b"}
fig, ax = plt.subplots(figsize=(10, 4.6))
label = dict(ha="center", va="bottom", fontsize=9)
for c in range(C_):                                                    # the input, channel by channel
    grid(ax, xi[c], 0, 8 - 4.5 * c, np.full((3, 3), tint[c], object), outline=(0, 0, R_, R_))
    ax.text(1.5, 8.2 - 4.5 * c, f"input channel {c}", **label)
rows = np.repeat([tint[0], tint[1]], R_ * R_)[:, None].repeat(Ho_ * Ho_, axis=1)
grid(ax, patches, 6, 8, rows, outline=(0, 0, C_ * R_ * R_, 1))        # the patch matrix
ax.text(8, 8.2, "patch matrix P\nC·R·S = 8 rows, Ho·Wo = 4 columns", **label)
wcol = np.repeat([[tint[0]] * (R_ * R_) + [tint[1]] * (R_ * R_)], K_, axis=0)
grid(ax, wi.reshape(K_, -1), 12, 8, wcol)                              # the weight matrix
ax.text(16, 8.2, "weights W\nK = 2 rows, C·R·S = 8 columns", **label)
grid(ax, y_gemm.reshape(K_, -1), 12, 3.5, np.full((K_, Ho_ * Ho_), "#c7e9c0", object))
ax.text(14, 3.7, "output Y = W @ P\nK = 2 rows, Ho·Wo = 4 columns", **label)
ax.annotate("", xy=(5.8, 6), xytext=(3.2, 6), arrowprops=dict(arrowstyle="->"))
ax.text(4.5, 6.2, "unroll", **label)
ax.set_xlim(-0.5, 20.5); ax.set_ylim(-1.2, 9.4); ax.set_aspect("equal"); ax.axis("off")
ax.set_title("im2col: every receptive field (outlined: 2 channels x 2x2 taps) becomes one column of P", fontsize=10)
plt.show()

# %% [markdown]
# The arithmetic equals direct's, and it runs in BLAS, tuned to the cache hierarchy. The price is the patch
# matrix: every input element is copied once per tap that reads it, so the whole patch matrix is about R·S
# times the input. This implementation does not build it whole: it fills it a chunk of images (or a band of
# output rows) at a time, within a workspace budget, and multiplies chunk by chunk. On the seed layer:

# %%
im2col = ALGORITHMS["im2col"]
whole_patches = seed.C * seed.R * seed.S * seed.out_hw[0] * seed.out_hw[1] * seed.N * 4 / 2**20
images, rows = im2col.chunk_plan(seed)
print(f"the whole patch matrix: {whole_patches:.0f} MiB = {whole_patches / seed_input_mib:.0f}x the "
      f"{seed_input_mib:.0f} MiB input (R·S = {seed.R * seed.S})")
print(f"built {images} image(s) x {rows} output rows at a time (budget {im2col.workspace_budget_bytes / 2**20:.0f} "
      f"MiB): workspace {im2col.workspace_bytes(seed) / 2**20:.1f} MiB, "
      f"{im2col.workspace_bytes(seed) / 2**20 / whole_patches:.0%} of the whole")

# %% [markdown]
# ## FFT and tiled FFT
#
# Convolution is a pointwise product in the frequency domain: transform the image and the kernel, multiply
# (summing over input channels, a batched complex GEMM), transform back, crop. The cost barely depends on the
# kernel size, so FFT can win for large kernels (measured in notebook 9). `fft` transforms whole images;
# `fft_tiled` cuts them into overlapping T x T tiles (**overlap-save**), so its transforms are short and stay in
# cache, and its spectra are the tiles', not the whole padded image's. How much workspace that saves depends on
# the layer:

# %%
print(inspect.getdoc(fft).split("\n\n")[0])
print(inspect.getdoc(fft_tiled).split("\n\n")[0])
for layer in (seed, ConvParams.from_shapes((8, 64, 56, 56), (64, 64, 3, 3), padding=1)):
    whole, tiles = (ALGORITHMS[n].workspace_bytes(layer) / 2**20 for n in ("fft", "fft_tiled"))
    plan = fft_tiled.cheapest_tile_plan(layer)
    print(f"{str(layer):<40} workspace: fft {whole:6.1f} MiB, fft_tiled {tiles:6.1f} MiB "
          f"({tiles / whole:.2f}x; tiles of {plan.Th}x{plan.Tw}, {plan.nth * plan.ntw} per image)")

# %% [markdown]
# ## Winograd F(m×m, 3×3)
#
# **F(2,3) by hand.** One dimension first: two outputs of a 3-tap filter g from four inputs d,
#
#     y0 = d0·g0 + d1·g1 + d2·g2
#     y1 = d1·g0 + d2·g1 + d3·g2
#
# cost 6 multiplications. Winograd's minimal filtering algorithm computes them with 4, from these products
# (the Cook-Toom construction with the points 0, 1, −1 and infinity):
#
#     m1 = (d0 − d2)·g0          m2 = (d1 + d2)·(g0 + g1 + g2)/2
#     m4 = (d3 − d1)·g2          m3 = (d2 − d1)·(g0 − g1 + g2)/2
#     y0 = m1 + m2 + m3          y1 = m2 − m3 + m4
#
# The filter's sums (g0 + g1 + g2)/2 and (g0 − g1 + g2)/2 are computed once per filter, not per output, so
# only the 4 products count. Worked with exact fractions:

# %%
d, g = [Fraction(v) for v in (3, -1, 4, 2)], [Fraction(v) for v in (2, 5, -3)]
m1, m2 = (d[0] - d[2]) * g[0], (d[1] + d[2]) * (g[0] + g[1] + g[2]) / 2
m3, m4 = (d[2] - d[1]) * (g[0] - g[1] + g[2]) / 2, (d[3] - d[1]) * g[2]
winograd_y = [m1 + m2 + m3, m2 - m3 + m4]
direct_y = [d[0] * g[0] + d[1] * g[1] + d[2] * g[2], d[1] * g[0] + d[2] * g[1] + d[3] * g[2]]
print(f"d = {[int(v) for v in d]}, g = {[int(v) for v in g]}")
print(f"m1 = {m1}, m2 = {m2}, m3 = {m3}, m4 = {m4}")
print(f"Winograd (4 multiplications): y = {[str(v) for v in winograd_y]}; "
      f"direct (6 multiplications): y = {[str(v) for v in direct_y]}; equal: {winograd_y == direct_y}")
assert winograd_y == direct_y

# %% [markdown]
# In matrix form this is y = Aᵀ [(G g) ⊙ (Bᵀ d)], with ⊙ the elementwise product of the 4 transformed values.
# `convalgos.winograd.cooktoom` builds Aᵀ, G and Bᵀ for any F(m, r) from the interpolation points, in exact
# `fractions.Fraction` arithmetic; nothing is typed in. F(2,3)'s, applied to the same d and g:

# %%
def show_matrix(name, rows):
    cells = [[str(v) for v in row] for row in rows]
    width = max(len(c) for row in cells for c in row)
    print(f"{name}:")
    for row in cells:
        print("   " + " ".join(c.rjust(width) for c in row))

f23 = cooktoom.cook_toom(2, 3)
for name in ("AT", "G", "BT"):
    show_matrix(name, getattr(f23, name))
Gg = [sum(row[j] * g[j] for j in range(3)) for row in f23.G]
BTd = [sum(row[j] * d[j] for j in range(4)) for row in f23.BT]
y_matrix = [sum(row[j] * Gg[j] * BTd[j] for j in range(4)) for row in f23.AT]
print(f"G g = {[str(v) for v in Gg]}, Bᵀ d = {[str(v) for v in BTd]}, Aᵀ[(G g) ⊙ (Bᵀ d)] = "
      f"{[str(v) for v in y_matrix]}: the hand-worked y: {y_matrix == winograd_y}")
assert y_matrix == winograd_y

# %% [markdown]
# **In two dimensions** the same matrices are applied along rows and columns: an m x m output tile of a 3x3
# filter comes from an (m+2) x (m+2) input tile d as Aᵀ [(G g Gᵀ) ⊙ (Bᵀ d B)] A, with (m+2)² multiplications
# instead of 9m². Summed over C input channels, the elementwise products become (m+2)² matrix products (one
# per position in the tile, over channels and tiles): that is where the time goes, in BLAS or in a fused
# kernel. Larger tiles save more multiplications but need more points, and the points' powers grow:

# %%
for m in (4, 6):
    mats = cooktoom.cook_toom(m, 3)
    largest = max(abs(v) for M in (mats.AT, mats.G, mats.BT) for row in M for v in row)
    print(f"F({m},3): alpha = {mats.alpha}, points {[str(a) for a in mats.points]} and infinity; identity holds "
          f"exactly: {cooktoom.identity_holds(mats)}; largest entry {largest}; multiplications per output "
          f"{mats.alpha ** 2 / m ** 2:.2f} (direct: 9)")
show_matrix("F(4,3) BT", cooktoom.cook_toom(4, 3).BT)

# %% [markdown]
# The transforms then add and cancel larger terms in floating point: fewer multiplications may cost accuracy.
# Measured on a wide layer (128 channels summed), in float32, over three random draws:

# %%
multiplies, werrors = {}, {}
xw = rng.standard_normal((1, 128, 24, 24), dtype=np.float32)
for trial in range(3):
    ww = rng.standard_normal((32, 128, 3, 3), dtype=np.float32)
    refw = reference.conv2d(xw.astype(np.float64), ww.astype(np.float64), padding=1)
    for name in ("direct", "winograd_2x2", "winograd_4x4", "winograd_6x6"):
        y = convalgos.conv2d(xw, ww, padding=1, algo=name)
        werrors.setdefault(name, []).append(reference.normwise_error(y, refw))
for name, errs in werrors.items():
    algo = ALGORITHMS[name]
    per_out = (algo.elementwise_multiplies_per_tile / algo.m**2) if name != "direct" else 9
    print(f"{name:<14} multiplies per output {per_out:5.2f}   normwise error (median of 3) {np.median(errs):.1e}")
medians = [np.median(werrors[n]) for n in ("winograd_2x2", "winograd_4x4", "winograd_6x6")]
growing = all(a < b for a, b in zip(medians, medians[1:]))
print("\nthe error grows with the tile (2x2 < 4x4 < 6x6):", growing,
      f"| 6x6 against direct: {medians[-1] / np.median(werrors['direct']):.0f}x the error")

# %% [markdown]
# Which of these algorithms wins a layer is a question of measurement, not of the FLOP column alone:
# notebook 2 shows benchmark mode choosing per layer, and notebook 9 measures three places where the winner
# changes (FFT's crossover with kernel size, Winograd fused or not, prepared weights in inference), each
# beside the count that explains it.
