"""What torch accepts, the passes accept: one unbatched sample (C, H, W) in every pass of convalgos and of
autotune, with the batched result's values; torch tensors keep channels_last; a dtype NumPy lacks (bfloat16)
gets the same clear dtype error as NumPy's int32."""
import numpy as np
import pytest

import autotune
import convalgos
from convalgos import reference
from float32_bounds import ANY_CHOICE, within

KW = dict(stride=2, padding=((1, 0), (2, 1)), dilation=1, groups=2)


def operands(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((4, 9, 8)).astype(np.float32)
    w = rng.standard_normal((6, 2, 3, 3)).astype(np.float32)
    p = convalgos.ConvParams.from_arrays(x[None], w, **KW)
    dy = rng.standard_normal(p.out_shape[1:]).astype(np.float32)
    return x, w, dy, p


@pytest.mark.parametrize("passes", [convalgos, autotune.Tuner()], ids=["convalgos", "autotune"])
def test_every_pass_takes_one_unbatched_sample(passes):
    x, w, dy, p = operands()
    y = passes.conv2d(x, w, None, **KW)
    dx = passes.conv2d_input(x.shape, w, dy, **KW)
    dw = passes.conv2d_weight(x, w.shape, dy, **KW)
    assert y.shape == p.out_shape[1:] and dx.shape == x.shape and dw.shape == w.shape
    assert reference.normwise_error(y, reference.forward(x[None], w, p)[0]) < 1e-5
    assert reference.normwise_error(dx, reference.backward_data(dy[None], w, p)[0]) < 1e-5
    assert reference.normwise_error(dw, reference.backward_filter(x[None], dy[None], p)) < 1e-5


def test_an_unbatched_out_is_written():
    x, w, dy, p = operands()
    out = np.full(p.out_shape[1:], np.nan, np.float32)
    assert convalgos.conv2d(x, w, None, **KW, out=out) is not None
    assert not np.isnan(out).any()


@pytest.mark.parametrize("call, match", [
    (lambda x, w, dy: convalgos.conv2d(x[0], w), r"x must be 3-D \(one sample\) or 4-D \(a batch\)"),
    (lambda x, w, dy: convalgos.conv2d_input(x.shape, w, dy[None], **KW), r"input_shape must be 4-D like grad_output"),
    (lambda x, w, dy: convalgos.conv2d_weight(x, w.shape, dy[None], **KW), r"grad_output must be 3-D like input"),
    (lambda x, w, dy: autotune.conv2d(x, w, out=np.zeros((1, 6, 5, 4), np.float32), **KW), r"out must be 3-D like x"),
])
def test_mixed_batching_is_refused_by_name(call, match):
    x, w, dy, _ = operands()
    with pytest.raises(ValueError, match=match):
        call(x, w, dy)


torch = pytest.importorskip("torch")


def test_bfloat16_gets_the_dtype_error_of_any_wrong_dtype():
    x = torch.zeros(1, 2, 5, 5, dtype=torch.bfloat16)
    w = torch.zeros(3, 2, 3, 3, dtype=torch.bfloat16)
    for call in (convalgos.conv2d, autotune.Tuner().conv2d):
        with pytest.raises(TypeError, match=r"x dtype must be one of \['float16', 'float32', 'float64'\], got "
                                            r"torch.bfloat16"):
            call(x, w)
    with pytest.raises(TypeError, match=r"x dtype must be one of .* got int32"):
        convalgos.conv2d(np.zeros((1, 2, 5, 5), np.int32), np.zeros((3, 2, 3, 3), np.int32))


@pytest.mark.parametrize("passes", [convalgos, autotune.Tuner()], ids=["convalgos", "autotune"])
def test_channels_last_comes_back_channels_last(passes):
    rng = np.random.default_rng(1)
    x = torch.from_numpy(rng.standard_normal((2, 4, 7, 6)).astype(np.float32))
    w = torch.from_numpy(rng.standard_normal((5, 4, 3, 3)).astype(np.float32))
    xl = x.contiguous(memory_format=torch.channels_last)
    y, expected = passes.conv2d(xl, w, padding=1), torch.nn.functional.conv2d(x, w, padding=1)
    assert y.is_contiguous(memory_format=torch.channels_last) and not y.is_contiguous()
    assert within(y, expected, ANY_CHOICE)                      # normwise: whichever algorithm ran
    dy = expected.contiguous(memory_format=torch.channels_last)
    dx = passes.conv2d_input(x.shape, w, dy, padding=1)
    assert dx.is_contiguous(memory_format=torch.channels_last)
    dw = passes.conv2d_weight(xl, w.shape, dy, padding=1)
    assert dw.is_contiguous()                                    # a weight's gradient stays in the weight's form
