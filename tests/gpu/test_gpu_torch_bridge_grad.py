"""The torch bridge's gradients on the GPU, checked as on the CPU: each GPU algorithm forced in turn (a Tuner
whose registry holds that one algorithm), a conv's forward, input and weight gradients in float32 against a
float64 run, as close as torch's own float32 run is (within twice its error, or the algorithm's own tolerance).

On a GPU: CUDA tensors, torch's side on cuDNN with TF32 off, on a layer whose weight gradient sums 8 x 28 x 28
= 6272 products per element (a long float32 reduction, as at 224 px). Under the simulator: CPU tensors read as
NumPy arrays, dispatched to the GPU registry by the simulated GPU's device, on a tiny layer."""
import pytest

import autotune  # before torch: it sets how the OpenMP runtimes wait
from autotune.devices import SimulatedGpuDevice
from convalgos import cuda as gpu
from convalgos.arrays import simulator_enabled

torch = pytest.importorskip("torch")

import autotune.torch as at  # noqa: E402
from autotune.torch.record import LayerRecord  # noqa: E402

ON_GPU = not simulator_enabled()
if ON_GPU and not torch.cuda.is_available():
    pytest.skip("torch without CUDA: the bridge's GPU path needs CUDA tensors", allow_module_level=True)

DEVICE = "cuda" if ON_GPU else "cpu"
#: (x shape, w shape): 3x3, padding 1, stride 1, which every GPU algorithm supports
LAYER = ((8, 16, 28, 28), (16, 16, 3, 3)) if ON_GPU else ((1, 2, 3, 3), (2, 2, 3, 3))


def passes(x, w, dy, conv):
    """(y, dx, dw) of ``conv`` at ``x``, ``w``, with ``dy`` the output's gradient (float64 results)."""
    x, w = x.detach().clone().requires_grad_(True), w.detach().clone().requires_grad_(True)
    y = conv(x, w)
    dx, dw = torch.autograd.grad(y, (x, w), dy)
    return [t.detach().double() for t in (y, dx, dw)]


def error(a, reference) -> float:
    return float((a - reference).norm() / max(float(reference.norm()), 1e-30))


@pytest.fixture(scope="module")
def runs():
    """The operands, the float64 run and torch's float32 run (TF32 off on the GPU)."""
    g = torch.Generator().manual_seed(0)
    x, w = (torch.randn(*shape, generator=g) for shape in LAYER)
    dy = torch.randn(x.shape[0], w.shape[0], x.shape[2], x.shape[3], generator=g)
    x, w, dy = (t.to(DEVICE) for t in (x, w, dy))
    tf32 = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    try:
        conv = (lambda x, w: torch.nn.functional.conv2d(x, w, padding=1))
        reference = passes(x.double(), w.double(), dy.double(), conv)
        theirs = passes(x, w, dy, conv)
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = tf32
    return x, w, dy, reference, theirs


@pytest.mark.parametrize("algo", list(gpu.ALGORITHMS))
def test_each_gpu_algorithms_gradients_are_as_close_to_float64_as_torchs(algo, runs):
    x, w, dy, reference, theirs = runs
    algorithm = gpu.ALGORITHMS[algo]
    devices = None if ON_GPU else [SimulatedGpuDevice()]
    tuner, record = autotune.Tuner({algo: algorithm}, devices=devices), LayerRecord()
    ours = passes(x, w, dy, lambda x, w: at.conv2d(x, w, None, 1, 1, tuner=tuner, record=record))
    # every pass the algorithm has through the dispatcher; one it lacks (the fused Winograds' backward_filter)
    # computed by torch's own conv, as the bridge promises where no algorithm serves a pass
    has = [op for op in ("forward", "backward_data", "backward_filter") if algorithm.implements(op)]
    assert {op: (r.dispatched, r.by_torch) for op, r in record.passes.items()} == {
        op: (1, 0) if op in has else (0, 1) for op in ("forward", "backward_data", "backward_filter")}
    for op, mine, torchs, ref in zip(("forward", "backward_data", "backward_filter"), ours, theirs, reference):
        allowed = max(2 * error(torchs, ref), algorithm.tolerance_of(op, "float32"))
        assert error(mine, ref) <= allowed, (op, error(mine, ref), error(torchs, ref))
    table = list(tuner.dispatch_table())
    assert {e.key.op for e in table} == set(has)
    assert all(e.algo == algo and e.key.device.startswith("cuda:") for e in table)
