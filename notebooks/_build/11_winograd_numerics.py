# %% [markdown]
# # 11. Winograd's numerics: tile size, interpolation points, float32 and float16
#
# Winograd's F(m x m, 3 x 3) computes an m x m tile of outputs with (m + 2)² multiplications instead of 9m²
# (notebook 1 built the matrices and worked F(2,3) by hand). The multiplications saved are paid for in
# accuracy: the transforms A^T, G and B^T have entries larger than 1, and the larger the tile, the larger they
# get. This notebook measures how much, and why:
#
# 1. the transforms of F(2,3), F(4,3) and F(6,3), from `convalgos.winograd.cooktoom`, with the **interpolation
#    points** they are built from, and their **condition numbers**;
# 2. the error of each against a float64 reference, in **float32 and float16**, with every multiply and add
#    rounded to the dtype, beside a **rounding-error bound** derived for exactly that computation;
# 3. **why the library's points differ from Lavin & Gray's**, and what a worse choice of points costs.
#
# Everything here is deterministic (seeded data, elementwise NumPy arithmetic): the numbers do not depend on
# how busy the machine is.

# %%
import machine      # notebooks/machine.py: the header every notebook prints
machine.describe()
import convalgos    # first: it sets the thread variables that numpy's OpenBLAS reads when it loads
import numpy as np
import matplotlib.pyplot as plt
from convalgos import reference
from convalgos.winograd.cooktoom import cook_toom

rng = np.random.default_rng(0)

# %% [markdown]
# ## The points
#
# F(m, 3) multiplies two polynomials, the filter's (degree 2) and a piece of the input's (degree m - 1), by
# evaluating both at α = m + 2 points, multiplying the values, and interpolating the product back (Cook-Toom).
# One point is "infinity" (the leading coefficient); the other α - 1 are numbers we choose. The evaluation
# rows (1, a, a², ...) go into A^T and G, the interpolation (the Lagrange basis, divided by products of
# differences of the points) into B^T and G. Points far from 1 give large powers; points close together give
# small differences and so large Lagrange coefficients.
#
# The generator's default points are 0, ±1, ±1/2, ±2, ±1/4, ... (the first α - 1). Lavin & Gray ("Fast
# Algorithms for Convolutional Neural Networks", 2016) print F(4x4, 3x3) with the points 0, ±1, ±2: giving
# the generator their points reproduces their A^T exactly (below). For F(6,3) the natural integer choice is
# 0, ±1, ±2, ±3. The condition number κ₂ (largest over smallest singular value, `np.linalg.cond`) of each
# matrix bounds how much it can magnify a relative error in its input; their product κ is the 1-D transform's
# worst case.

# %%
CONFIGS = {                                  # label -> (m, finite points; None = the generator's default)
    "F(2,3)": (2, None),
    "F(4,3)": (4, None),
    "F(4,3) Lavin & Gray": (4, (0, 1, -1, 2, -2)),
    "F(6,3)": (6, None),
    "F(6,3) integers": (6, (0, 1, -1, 2, -2, 3, -3)),
}
transforms = {label: cook_toom(m, 3, points) for label, (m, points) in CONFIGS.items()}
print(f"{'transform':<22}{'points (and infinity)':<34}{'max |entry| of A^T, G, B^T':<30}"
      f"{'κ₂ of A^T, G, B^T':<26}{'κ':>10}")
kappa = {}
for label, mats in transforms.items():
    AT, G, BT = mats.as_float(np.float64)
    conds = [np.linalg.cond(M) for M in (AT, G, BT)]
    kappa[label] = float(np.prod(conds))
    print(f"{label:<22}{', '.join(map(str, mats.points)):<34}"
          f"{', '.join(f'{abs(M).max():.3g}' for M in (AT, G, BT)):<30}"
          f"{', '.join(f'{c:.1f}' for c in conds):<26}{kappa[label]:>10.0f}")
print("\nF(4,3) from Lavin & Gray's points, A^T:")
for row in transforms["F(4,3) Lavin & Gray"].AT:
    print("   ", "  ".join(f"{str(v):>3}" for v in row))

# %% [markdown]
# ## The experiment
#
# Random float32 inputs: C = 16 channels of 400 independent α x α input tiles and a 3x3 filter per channel,
# N(0, 1) (the inputs are first rounded to the dtype, so only the algorithm's own rounding is measured).
# Each tile's m x m output is computed three ways:
#
# - **Winograd in the dtype**: U = G g G^T per channel, V = B^T d B per tile and channel, M = Σ_c U_c ⊙ V_c,
#   Y = A^T M A; every transform entry is a sequential sum of products, and **every multiply and add is
#   rounded to the dtype** (NumPy rounds each float16 operation's result to float16): the "true half"
#   arithmetic of a half-precision kernel that also accumulates in half;
# - **direct in the dtype**: the 9C products summed one after another, every operation rounded likewise;
# - **exact**: the same sum in float64.
#
# The error is normwise, as everywhere in this library: max |y - exact| / max |exact|.
#
# **The bound.** With u the unit roundoff (2⁻²⁴ in float32, 2⁻¹¹ in float16) and γ_n = n u / (1 - n u), a
# sequential sum of n rounded products is off by at most γ_n times the sum of the absolute values of its terms
# (Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., §3.1). Following each stage (G rounded
# to the dtype: 2 roundings; U: 2 · 3; V: 2α; the product: 1; the channel sum: C; Y: 2α):
#
#     |Y_computed - Y| ≤ γ_n · E,    n = 2 + 6 + 4α + 1 + C,
#     E = |A^T| ( Σ_c (|G| |g_c| |G|^T) ⊙ (|B^T| |d_c| |B|) ) |A|
#
# to first order in u (A^T and B^T are exact in both dtypes here: the cell below checks it). Normwise:
# error ≤ γ_n · max E / max |Y|. The same argument gives direct's bound, γ_{9C} · max(Σ |g| |d|) / max |Y|. The
# **amplification** max E / max |Y| is what the transforms add: 1 would mean no cancellation at all.

# %%
C, TILES = 16, 400

def apply(X, d, axis):
    """X (b x a) applied along ``axis`` of d: output i is the sequential sum over j of X[i, j] * d[..., j]
    (zero entries skipped), every operation rounded to d's dtype."""
    d = np.moveaxis(d, axis, -1)
    out = np.empty(d.shape[:-1] + (X.shape[0],), d.dtype)
    for i in range(X.shape[0]):
        acc = None
        for j in np.flatnonzero(X[i]):
            term = X[i, j] * d[..., j]
            acc = term if acc is None else acc + term
        out[..., i] = acc
    return np.moveaxis(out, -1, axis)

def sandwich(X, d):
    """X d X^T on the last two axes of d."""
    return apply(X, apply(X, d, -2), -1)

def winograd(mats, d, g, dtype):
    """Y (tiles, m, m) of F(m x m, 3 x 3), every operation in ``dtype``."""
    AT, G, BT = (M.astype(dtype) for M in mats.as_float(np.float64))
    U = sandwich(G, g.astype(dtype)[:, None])          # (C, 1, α, α)
    V = sandwich(BT, d.astype(dtype))                  # (C, tiles, α, α)
    M = U[0] * V[0]
    for c in range(1, len(d)):
        M = M + U[c] * V[c]
    return sandwich(AT, M)

def taps(d, m):
    """(c, r, s, tile window): the inputs tap (r, s) of each channel multiplies, for every output of a tile."""
    return ((c, r, s, d[c, :, r:r + m, s:s + m]) for c in range(len(d)) for r in range(3) for s in range(3))

def direct(d, g, m, dtype):
    d, g, y = d.astype(dtype), g.astype(dtype), None
    for c, r, s, window in taps(d, m):
        y = g[c, r, s] * window if y is None else y + g[c, r, s] * window
    return y

def gamma(n, u):
    return n * u / (1 - n * u)

results = {}
for dtype in (np.float32, np.float16):
    u = np.finfo(dtype).eps / 2
    for label, mats in transforms.items():
        m, a = mats.m, mats.alpha
        AT, G, BT = mats.as_float(np.float64)
        assert all(np.array_equal(M.astype(dtype).astype(np.float64), M) for M in (AT, BT)), label  # exact in dtype
        d = rng.standard_normal((C, TILES, a, a)).astype(dtype).astype(np.float64)
        g = rng.standard_normal((C, 3, 3)).astype(dtype).astype(np.float64)
        exact = sum(g[c, r, s] * window for c, r, s, window in taps(d, m))
        scale = abs(exact).max()
        E = sum((abs(G) @ abs(g[c]) @ abs(G).T) * (abs(BT) @ abs(d[c]) @ abs(BT).T) for c in range(C))
        E = abs(AT) @ E @ abs(AT).T
        E_direct = sum(abs(g[c, r, s] * window) for c, r, s, window in taps(d, m))
        results[np.dtype(dtype).name, label] = {
            "m": m, "u": u,
            "winograd": abs(winograd(mats, d, g, dtype) - exact).max() / scale,
            "bound": gamma(2 + 6 + 4 * a + 1 + C, u) * E.max() / scale,
            "amplification": E.max() / scale,
            "direct": abs(direct(d, g, m, dtype) - exact).max() / scale,
            "direct bound": gamma(9 * C, u) * E_direct.max() / scale,
        }

print(f"{'dtype':<9}{'transform':<22}{'Winograd error':>16}{'its bound':>12}{'amplification':>15}"
      f"{'direct error':>14}{'its bound':>12}")
for (dt, label), r in results.items():
    print(f"{dt:<9}{label:<22}{r['winograd']:>16.2e}{r['bound']:>12.2e}{r['amplification']:>15.1f}"
          f"{r['direct']:>14.2e}{r['direct bound']:>12.2e}")

# %%
fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
for ax, dt in zip(axes, ("float32", "float16")):
    default = [label for label in transforms if CONFIGS[label][1] is None]
    ms = [results[dt, label]["m"] for label in default]
    ax.plot(ms, [results[dt, label]["winograd"] for label in default], "o-", label="Winograd, default points")
    ax.plot(ms, [results[dt, label]["bound"] for label in default], "o:", color="C0", alpha=0.6,
            label="bound, default points")
    for label, marker in (("F(4,3) Lavin & Gray", "s"), ("F(6,3) integers", "^")):
        r = results[dt, label]
        ax.plot(r["m"], r["winograd"], marker, color="C3" if marker == "^" else "C2", label=label + " (error)")
    ax.plot(ms, [results[dt, label]["direct"] for label in default], "k--", label="direct, same dtype")
    ax.axhline(results[dt, default[0]]["u"], color="gray", lw=0.8)
    ax.text(2.05, results[dt, default[0]]["u"] * 1.3, f"unit roundoff {results[dt, default[0]]['u']:.1e}",
            fontsize=8, color="gray")
    ax.set_yscale("log"); ax.set_xticks([2, 4, 6]); ax.set_xlabel("output tile m of F(m x m, 3 x 3)")
    ax.set_title(f"{dt}: every operation rounded to {dt}", fontsize=10); ax.grid(alpha=0.3)
axes[0].set_ylabel("normwise error, max|y - exact| / max|exact|")
handles, labels = axes[0].get_legend_handles_labels()
fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=8, bbox_to_anchor=(0.5, -0.1))
plt.show()

# %% [markdown]
# ## What the numbers say
#
# The conclusions below are printed from the table above, and each is checked (`assert`): the notebook fails
# to run if a change to the generator or to this experiment makes one false.

# %%
def f32(label):
    return results["float32", label]

def f16(label):
    return results["float16", label]

tiles = ["F(2,3)", "F(4,3)", "F(6,3)"]
errors32 = [f32(t)["winograd"] for t in tiles]
print("1. the error grows with the tile (float32): " + " < ".join(f"{t} {e:.2e}" for t, e in zip(tiles, errors32))
      + f"; F(6,3)'s is {errors32[2] / f32('F(6,3)')['direct']:.0f}x direct's")
assert errors32[0] < errors32[1] < errors32[2]

held = all(r["winograd"] <= r["bound"] and r["direct"] <= r["direct bound"] for r in results.values())
slack = [r["bound"] / r["winograd"] for r in results.values()]
print(f"2. every measured error is under its bound: {held}; the bound is {min(slack):.0f}-{max(slack):.0f}x the "
      "measured error (it assumes every rounding error has the worst size and the same sign; real ones "
      "partly cancel)")
assert held

per_amp = [r["winograd"] / (r["u"] * r["amplification"]) for r in results.values()]
amps = [r["amplification"] for r in results.values()]
print(f"3. the bound's data-dependent factor tracks the error: error / (u x amplification) stays within "
      f"{min(per_amp):.2f}-{max(per_amp):.2f} while the amplification ranges over {min(amps):.0f}-{max(amps):.0f}")
assert max(per_amp) / min(per_amp) < 10 and max(amps) / min(amps) > 1000

ratios = [f16(t)["winograd"] / f32(t)["winograd"] for t in transforms]
u_ratio = f16(tiles[0])["u"] / f32(tiles[0])["u"]
print(f"4. float16 errors are {min(ratios):.0f}-{max(ratios):.0f}x the float32 ones (the unit roundoffs' ratio is "
      f"{u_ratio:.0f}): in float16 F(4,3) is off by {f16('F(4,3)')['winograd']:.1%} and F(6,3) by "
      f"{f16('F(6,3)')['winograd']:.1%} of the output's scale, against {f16('F(6,3)')['direct']:.2%} for direct; "
      f"only F(2,3) ({f16('F(2,3)')['winograd']:.2%}) is as accurate as direct in true half precision")
assert u_ratio / 4 < min(ratios) and max(ratios) < u_ratio * 4
assert f16("F(2,3)")["winograd"] <= 1.5 * f16("F(2,3)")["direct"] < f16("F(4,3)")["winograd"]

lg, ours = (f32("F(4,3) Lavin & Gray"), f32("F(4,3)"))
lg16, ours16 = (f16("F(4,3) Lavin & Gray"), f16("F(4,3)"))
print(f"5. F(4,3) with Lavin & Gray's ±2 against the default ±1/2: float32 {lg['winograd']:.2e} against "
      f"{ours['winograd']:.2e}, float16 {lg16['winograd']:.2e} against {ours16['winograd']:.2e}; amplification "
      f"{lg['amplification']:.0f} against {ours['amplification']:.0f}: the same accuracy")
assert all(0.5 < a["winograd"] / b["winograd"] < 2 for a, b in ((lg, ours), (lg16, ours16)))

ints, best = f32("F(6,3) integers"), f32("F(6,3)")
print(f"6. F(6,3) with the integers ±3 instead of ±1/2: error {ints['winograd']:.2e} against {best['winograd']:.2e} "
      f"({ints['winograd'] / best['winograd']:.0f}x), κ {kappa['F(6,3) integers']:.2g} against "
      f"{kappa['F(6,3)']:.2g}; in float16 it is off by {f16('F(6,3) integers')['winograd']:.0%}")
assert ints["winograd"] > 30 * best["winograd"] and kappa["F(6,3) integers"] > 30 * kappa["F(6,3)"]

# %% [markdown]
# ## Why the library's points are not Lavin & Gray's
#
# Lavin & Gray needed four finite points for F(4,3) and took 0, ±1, ±2. The generator takes 0, ±1, ±1/2. The
# two sets are mirror images: the substitution x → 1/x (which maps a polynomial to its coefficients reversed)
# swaps 0 with infinity and 2 with 1/2, so {0, ±1, ±1/2, ∞} becomes {∞, ±1, ±2, 0}. The two F(4,3)s are the
# same algorithm with the tile read backwards, up to how the rows are scaled, and conclusion 5 measures them
# equal. The individual κ₂ differ (the rows' scaling moves the large entries between A^T and G: Lavin &
# Gray's A^T holds 8 = 2³, the default's G holds 4/3 where theirs holds 1), which is why a per-matrix condition
# number is a worst case and not a prediction; the amplification, which looks at the data, is what tracks the
# error (conclusion 3).
#
# The choice matters from F(6,3) on: six finite points are needed, and the only way to keep them all of size
# near 1 is to take reciprocal pairs, 0, ±1, ±1/2, ±2 (a set that is its own mirror image). The integers
# 0, ±1, ±2, ±3 put 3⁵ = 243 into A^T and entries up to 49 into B^T, and conclusion 6 prices that. Every point
# the generator uses is 0 or a power of two, so A^T (powers of the points) and B^T (scaled to coprime
# integers) are exact in float32 and in float16: the rounding starts in the arithmetic, not in the matrices
# (the assert in the experiment's cell checks it).
#
# ## What the library does with this
#
# `convalgos` computes float16 layers in float32 and rounds the result once (`convalgos/winograd/shared.py`):
# the true-half rows above show why, since F(4,3) and F(6,3) computed in half precision throughout are several
# times less accurate than direct in half (conclusion 4). The library's own error on a 16-channel layer, per
# algorithm and dtype, against the float64 reference:

# %%
x = rng.standard_normal((1, C, 24, 24), dtype=np.float32)
w = rng.standard_normal((8, C, 3, 3), dtype=np.float32)
library = {}
for dt in (np.float32, np.float16):
    xd, wd = x.astype(dt), w.astype(dt)
    ref = reference.conv2d(xd, wd, padding=1)
    for algo in ("direct", "winograd_2x2", "winograd_4x4", "winograd_6x6"):
        library[np.dtype(dt).name, algo] = reference.normwise_error(convalgos.conv2d(xd, wd, padding=1, algo=algo), ref)
for dt in ("float32", "float16"):
    print(f"{dt}: " + ", ".join(f"{algo} {library[dt, algo]:.1e}" for algo in
                                ("direct", "winograd_2x2", "winograd_4x4", "winograd_6x6")))
half_gain = f16("F(6,3)")["winograd"] / library["float16", "winograd_6x6"]
print(f"winograd_6x6 in float16 (computed in float32, rounded once): {library['float16', 'winograd_6x6']:.1e}, "
      f"{half_gain:.0f}x smaller than F(6,3) in true half precision above; in float32 it is "
      f"{library['float32', 'winograd_6x6'] / library['float32', 'direct']:.0f}x direct's error (the experiment above: "
      f"{f32('F(6,3)')['winograd'] / f32('F(6,3)')['direct']:.0f}x)")
assert half_gain > 10 and library["float32", "winograd_6x6"] > library["float32", "direct"]
