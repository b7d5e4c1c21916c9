"""The reference is itself checked on small cases worked by hand."""
import numpy as np

from convalgos import reference


def test_cross_correlation_not_convolution():
    x = np.arange(9.0).reshape(1, 1, 3, 3)          # [[0 1 2] [3 4 5] [6 7 8]]
    w = np.array([[[[1.0, 0.0], [0.0, -1.0]]]])      # y[i,j] = x[i,j] - x[i+1,j+1] = -4 everywhere
    np.testing.assert_array_equal(reference.conv2d(x, w), np.full((1, 1, 2, 2), -4.0))
    w = np.array([[[[0.0, 1.0], [0.0, 0.0]]]])       # picks x[i, j+1]
    np.testing.assert_array_equal(reference.conv2d(x, w)[0, 0], [[1, 2], [4, 5]])


def test_padding_stride_dilation_by_hand():
    x = np.arange(16.0).reshape(1, 1, 4, 4)
    ones = np.ones((1, 1, 3, 3))
    # padding 1 then stride 2: windows centred on (0,0), (0,2), (2,0), (2,2)
    y = reference.conv2d(x, ones, padding=1, stride=2)[0, 0]
    np.testing.assert_array_equal(y, [[0 + 1 + 4 + 5, 1 + 2 + 3 + 5 + 6 + 7],
                               [4 + 5 + 8 + 9 + 12 + 13, 5 + 6 + 7 + 9 + 10 + 11 + 13 + 14 + 15]])
    # dilation 3 with a 2x2 kernel of ones: x[0,0] + x[0,3] + x[3,0] + x[3,3]
    y = reference.conv2d(x, np.ones((1, 1, 2, 2)), dilation=3)
    np.testing.assert_array_equal(y, [[[[0 + 3 + 12 + 15]]]])
    # asymmetric padding: one zero row on top only, kernel picks the top-left element of each window
    w = np.zeros((1, 1, 2, 1)); w[0, 0, 0, 0] = 1.0
    y = reference.conv2d(x, w, padding=((1, 0), (0, 0)))[0, 0]
    np.testing.assert_array_equal(y, np.vstack([np.zeros(4), x[0, 0, :3]]))


def test_groups_bias_and_channels():
    x = np.stack([np.ones((2, 2)), 2 * np.ones((2, 2))])[None]           # C=2, values 1 and 2
    w = np.ones((4, 1, 1, 1)) * np.array([1, 10, 100, 1000.0])[:, None, None, None]
    y = reference.conv2d(x, w, bias=np.array([0.5, 0, 0, 0]), groups=2)
    # groups=2: outputs 0,1 see channel 0 (value 1), outputs 2,3 see channel 1 (value 2)
    np.testing.assert_array_equal(y[0, :, 0, 0], [1.5, 10, 200, 2000])
    y = reference.conv2d(x, np.ones((1, 2, 1, 1)))                          # sums the channels
    np.testing.assert_array_equal(y, np.full((1, 1, 2, 2), 3.0))


def test_matches_torch_when_installed():
    import pytest
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 6, 9, 7))
    w = rng.standard_normal((4, 3, 3, 2))
    b = rng.standard_normal(4)
    kw = dict(stride=(2, 1), padding=(1, 2), dilation=(1, 2), groups=2)
    expected = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(w), torch.tensor(b), **kw).numpy()
    np.testing.assert_allclose(reference.conv2d(x, w, b, **kw), expected, rtol=1e-12, atol=1e-12)


def test_normwise_error():
    ref = np.array([1.0, -4.0, 2.0])
    assert reference.normwise_error(ref + [0, 0, 0.5], ref) == 0.125
    assert reference.normwise_error(np.zeros(0), np.zeros(0)) == 0.0


def test_backward_passes_match_torchs_float64_gradients_when_installed():
    """Both gradients equal torch's autograd in float64, where stride leaves input rows unread (zero gradient),
    with asymmetric padding, dilation and groups: the per-kernel-row products read the sum the other way round."""
    import pytest
    torch = pytest.importorskip("torch")
    from convalgos import ConvParams
    rng = np.random.default_rng(1)
    for xs, ws, kw in (((2, 6, 10, 9), (4, 3, 3, 2), dict(stride=(3, 2), padding=(1, 2), dilation=(1, 2), groups=2)),
                       ((1, 3, 17, 17), (5, 3, 5, 5), dict(stride=4, padding=2))):
        x, w = torch.tensor(rng.standard_normal(xs), requires_grad=True), torch.tensor(rng.standard_normal(ws),
                                                                                      requires_grad=True)
        y = torch.nn.functional.conv2d(x, w, **kw)
        dy = torch.tensor(rng.standard_normal(y.shape))
        y.backward(dy)
        p = ConvParams.from_shapes(xs, ws, **kw)
        np.testing.assert_allclose(reference.backward_data(dy.numpy(), w.detach().numpy(), p), x.grad.numpy(),
                                   rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(reference.backward_filter(x.detach().numpy(), dy.numpy(), p), w.grad.numpy(),
                                   rtol=1e-12, atol=1e-12)
