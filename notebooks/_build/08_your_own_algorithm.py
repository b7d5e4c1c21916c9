# %% [markdown]
# # 8. Write your own algorithm
#
# Every algorithm in `convalgos` answers the same few questions (which layers it supports and why not, how much
# workspace and how many FLOPs it needs, how far from the float64 reference it may be) and writes one pass into
# an output it is given. A convolution of your own can answer them too. Then `convalgos.testing` checks it on
# layers that hypothesis draws and shrinks, and `convalgos.register` puts it into the autotuner's race beside
# the built-ins.
#
# This notebook writes one (a shift-and-add loop in NumPy, with a bug in it), lets the property test find the
# bug and shrink it to the smallest layer that shows it, fixes it, and races it.

# %%
import machine      # notebooks/machine.py: the header every notebook prints
machine.describe()
import autotune, convalgos    # first: it sets the thread variables that numpy's OpenBLAS reads when it loads
import numpy as np
from convalgos import ConvParams, Support, reference
from convalgos.testing import CheckFailure, check_algorithm


# %% [markdown]
# ## The algorithm: shift and add
#
# A convolution is a sum over the kernel's taps. Tap (r, s) multiplies every output pixel's input at offset
# (r * dilation, s * dilation) by the weights `w[:, :, r, s]`: one matrix product of the K x C weights with the
# C x (N Ho Wo) window of the padded input that the tap reads. Summing R x S such products gives y.
# FLOPs: 2 N K C R S Ho Wo, the same as the direct loop (`p.flops`), all of them in BLAS; the price is a copy
# of a strided window of the input per tap.
#
# A subclass of `convalgos.Algorithm` needs a `name` and a `forward` that writes into `out`; it states its
# limits (`constraints`, with a reason) and the workspace it allocates (`workspace_bytes`). The window below
# has a bug, of the kind that hand-picked tests miss.

# %%
class ShiftAndAdd(convalgos.Algorithm):
    """y = sum over the R x S taps (r, s) of w[:, :, r, s] @ (the window of padded x the tap reads)."""

    name = "shift_and_add"

    def constraints(self, p, op="forward"):
        if p.groups != 1:
            return Support(False, f"takes groups=1 only, got groups={p.groups}")
        return Support(True)

    def workspace_bytes(self, p, op="forward"):
        (Hp, Wp), (Ho, Wo) = p.padded_hw, p.out_hw
        # the padded copy of x; the running sum, one tap's window (copied: it is strided) and its product
        return p.itemsize * (p.N * p.C * Hp * Wp + p.N * (2 * p.K + p.C) * Ho * Wo)

    def window(self, p, r, s):
        """The rows and columns of the padded input that tap (r, s) reads, one per output."""
        (sh, sw), (Ho, Wo) = p.stride, p.out_hw
        return slice(r, r + sh * (Ho - 1) + 1, sh), slice(s, s + sw * (Wo - 1) + 1, sw)

    def forward(self, x, w, p, out):
        xpad = np.pad(x, ((0, 0), (0, 0)) + p.padding)
        total = np.zeros((p.N, p.K, p.out_hw[0] * p.out_hw[1]), out.dtype)
        for r in range(p.R):
            for s in range(p.S):
                rows, cols = self.window(p, r, s)
                total += w[:, :, r, s] @ xpad[:, :, rows, cols].reshape(p.N, p.C, -1)
        out[...] = total.reshape(out.shape)

# %% [markdown]
# ## Tested by hand
#
# A few layers of the kind one writes by hand: a 3x3 "same" layer, a strided one, a 1x1. The error is the
# normwise one every algorithm is held to, max|y - ref| / max|ref|, against the float64 reference.

# %%
mine = ShiftAndAdd()
rng = np.random.default_rng(0)
hand = [ConvParams.from_shapes((2, 8, 12, 12), (16, 8, 3, 3), padding=1),
        ConvParams.from_shapes((2, 8, 13, 13), (16, 8, 3, 3), padding=1, stride=2),
        ConvParams.from_shapes((2, 8, 12, 12), (16, 8, 1, 1))]
tolerance = mine.tolerance_of("forward", "float32")
hand_errors = []
for p in hand:
    x, w = rng.standard_normal(p.in_shape, np.float32), rng.standard_normal(p.weight_shape, np.float32)
    y = convalgos.run(mine, "forward", x, w, p)
    hand_errors.append(reference.normwise_error(y, reference.conv2d(x, w, stride=p.stride, padding=p.padding)))
    print(f"{str(p):<44} error {hand_errors[-1]:.1e}")
print(f"\ntolerance {tolerance:.0e}: {sum(e <= tolerance for e in hand_errors)} of {len(hand)} hand-picked layers "
      "pass")
assert all(e <= tolerance for e in hand_errors)          # the bug hides from hand-picked layers...

# %% [markdown]
# ## Tested by properties
#
# `check_algorithm` probes `supports` to learn which layers the algorithm takes, then lets hypothesis draw
# layers among them (shapes, stride, padding of every form, dilation, dtype) and checks on each: agreement with
# the float64 reference within the algorithm's tolerance, the adjoint identity with the reference's other
# passes, that every output element is written, that `supports` is honest, that the declared workspace bounds
# what is allocated, and that a claim of determinism holds. When a check fails, hypothesis shrinks the layer to
# the smallest that still fails. `max_examples` and `seed` keep this run short and repeatable (the default is
# 100 layers per pass; the `convalgos-thorough` profile draws 1000).

# %%
try:
    check_algorithm(mine, max_examples=40, seed=0)
    found = None
except CheckFailure as failure:
    found = failure
    print(failure)

# %% [markdown]
# The smallest failing layer, feature by feature: what it has beyond the simplest layer (one image, one
# channel, stride 1, no padding, no dilation) is where to look. The printed line reproduces it.

# %%
assert found is not None                                  # ... and the property test finds it
smallest = found.counterexample.layer
simplest = {"N": 1, "C": 1, "K": 1, "stride": (1, 1), "padding": ((0, 0), (0, 0)), "dilation": (1, 1)}
beyond = {name: getattr(smallest, name) for name, plain in simplest.items() if getattr(smallest, name) != plain}
print("check that failed first:", found.counterexample.check)
print("smallest failing layer:", smallest, f"(kernel {smallest.R}x{smallest.S})")
print("beyond the simplest layer it has:", beyond or "nothing")
print("reproduce:", found.counterexample.call)
try:
    exec(found.counterexample.call, {"convalgos": convalgos, "alg": mine})
except AssertionError as again:
    print("\nre-run on that one layer:", str(again)[:160], "...")
untried = [name for name in beyond if all(getattr(p, name) == simplest[name] for p in hand)]
print(f"\nof those, the hand-picked layers all had the simplest value of: {', '.join(untried) or 'none'}")

# %% [markdown]
# ## The fix
#
# Tap (r, s) reads rows r * dilation + stride * i: the window forgot the dilation. The fixed window, and the
# same check again.

# %%
class ShiftAndAddFixed(ShiftAndAdd):
    def window(self, p, r, s):
        (sh, sw), (dh, dw), (Ho, Wo) = p.stride, p.dilation, p.out_hw
        return slice(r * dh, r * dh + sh * (Ho - 1) + 1, sh), slice(s * dw, s * dw + sw * (Wo - 1) + 1, sw)


fixed = ShiftAndAddFixed()
result = check_algorithm(fixed, max_examples=40, seed=0)
print(result)
assert result.ok
print("\nevery check held:", result.ok, "| the layer that failed before now:",
      convalgos.testing.check_layer(fixed, "forward", smallest, seed=found.counterexample.seed)["agreement"])

# %% [markdown]
# From a shell, the same check on an algorithm in a module, for another project's CI (it exits 1 when a check
# fails): `python -m convalgos.check mypackage.conv:ShiftAndAdd --max-examples 200`.
#
# ## In the race
#
# `convalgos.register` adds it to the CPU registry: the autotuner now considers it for every layer whose
# `supports` holds, checks its result against the reference like any other, and times it beside the built-ins.
# The heuristics (benchmark mode off) hold no measurement of it, so they rank it after the algorithms they
# measured, fewest FLOPs first, and the rule's name says so.

# %%
convalgos.register(fixed)
layers = [ConvParams.from_shapes((8, 64, 28, 28), (64, 64, 3, 3), padding=1),     # ResNet-like 3x3
          ConvParams.from_shapes((8, 256, 14, 14), (256, 256, 1, 1)),             # pointwise
          ConvParams.from_shapes((8, 16, 16, 16), (16, 16, 5, 5), padding=2)]     # a 5x5 on few channels
operands = [(rng.standard_normal(p.in_shape, np.float32), rng.standard_normal(p.weight_shape, np.float32))
            for p in layers]

heuristic = autotune.Tuner(benchmark=False)
heuristic.conv2d(*operands[0], padding=1)
(entry,) = heuristic.dispatch_table()
print("benchmark off:", entry.algo, "chosen by rule", repr(entry.rule))
print("shift_and_add ranked", entry.ranked.index("shift_and_add") + 1, "of", len(entry.ranked))

tuner = autotune.Tuner(benchmark=True)
for p, (x, w) in zip(layers, operands):
    tuner.conv2d(x, w, padding=p.padding)
table = tuner.dispatch_table()
print(table)

# %% [markdown]
# ## Why it wins or loses
#
# For each layer: the user's algorithm against the winner, with what each computes (FLOPs, from `flops`) and
# what each moves beyond the operands. For shift-and-add that is known from its code: the padded copy of x,
# and per tap a window copied (written, then read by the product), the product written and added into the
# running sum (read and written), so about 2 N C Ho Wo + 3 N K Ho Wo elements per tap. For the built-ins the
# table shows their workspace, which each writes and reads at least once.

# %%
def moved_bytes(p):
    """Bytes shift-and-add writes or reads beyond the operands: the padded copy, then per tap the window copy
    (written and read), its product (written and read) and the running sum (read and written)."""
    (Hp, Wp), (Ho, Wo) = p.padded_hw, p.out_hw
    return p.itemsize * (2 * p.N * p.C * Hp * Wp + p.R * p.S * (2 * p.N * p.C + 3 * p.N * p.K) * Ho * Wo)


entries = {e.key.params: e for e in table}
wins = []
for p in layers:
    e = entries[p]
    timed = sorted(e.times, key=e.times.get)
    won = e.algo == "shift_and_add"
    best = timed[1] if won else e.algo                       # the runner-up when it won, else the winner
    mine_s, best_s = e.times["shift_and_add"], e.times[best]
    flops_mine, flops_best = fixed.flops(p), convalgos.ALGORITHMS[best].flops(p)
    rate_mine, rate_best = flops_mine / mine_s / 1e9, flops_best / best_s / 1e9
    operand_bytes = p.itemsize * (np.prod(p.in_shape) + np.prod(p.weight_shape) + np.prod(p.out_shape))
    moved = moved_bytes(p)
    wins.append(won)
    print(p)
    print(f"  shift_and_add {mine_s * 1e3:.2f} ms, rank {timed.index('shift_and_add') + 1} of {len(timed)} timed; "
          f"{'runner-up' if won else 'winner'} {best} {best_s * 1e3:.2f} ms")
    print(f"  FLOPs: shift_and_add {flops_mine / 1e9:.3f} G at {rate_mine:.0f} GFLOP/s; {best} {flops_best / 1e9:.3f} G "
          f"({flops_best / flops_mine:.2f}x) at {rate_best:.0f} GFLOP/s")
    print(f"  bytes beyond the operands ({operand_bytes / 1e6:.1f} MB): shift_and_add moves {moved / 1e6:.1f} MB "
          f"({moved / operand_bytes:.1f}x the operands, {p.R * p.S} tap window(s)); {best}'s workspace "
          f"{e.workspace[best] / 1e6:.1f} MB")
    if won:
        why = (f"it wins by {best_s / mine_s:.2f}x: {best} does {flops_best / flops_mine:.2f}x its FLOPs, and "
               f"shift_and_add runs its own at {rate_mine / rate_best:.2f}x {best}'s rate")
    elif flops_best < 0.9 * flops_mine:
        why = (f"it takes {mine_s / best_s:.2f}x as long: {best} does {flops_mine / flops_best:.2f}x fewer FLOPs "
               f"(and runs them at {rate_best / rate_mine:.2f}x shift_and_add's rate)")
    else:
        why = (f"it takes {mine_s / best_s:.2f}x as long with {flops_mine / flops_best:.2f}x {best}'s FLOPs: {best} "
               f"runs its own at {rate_best / rate_mine:.2f}x shift_and_add's rate, while shift_and_add moves "
               f"{moved / operand_bytes:.1f}x the operands' bytes")
    print("  " + why)
print(f"\nshift_and_add won {sum(wins)} of {len(layers)} layers"
      + (": the " + ", ".join(f"{p.R}x{p.S}" for p, won in zip(layers, wins) if won) + " one(s)" if any(wins) else ""))

# %% [markdown]
# Each margin above is one tuning: a margin within the measured noise can go the other way on another run (an
# entry's tied list names the candidates that were within it; notebook 5 races such a pair). The FLOPs and
# bytes beside them do not change from run to run. `convalgos.unregister` takes the algorithm out of the registry again.

# %%
convalgos.unregister("shift_and_add")
print("registered CPU algorithms:", list(convalgos.ALGORITHMS))
