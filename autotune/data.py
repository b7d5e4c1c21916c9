"""The digits data set for training examples: scikit-learn's 1,797 handwritten digits, resized for LeNet-5.

scikit-learn ships the images inside its package (no download). They are 8x8 with 17 grey levels (0..16);
LeNet-5 is defined on 32x32, so each image is upsampled 4x by bilinear interpolation with torch's
``F.interpolate(mode="bilinear", align_corners=False)`` rule: output pixel i samples the input at
(i + 0.5) * 8/32 - 0.5 (clamped to the image), weighting its two nearest pixels by distance, along rows then
columns. Strokes stay smooth (nearest-neighbour would turn each pixel into a 4x4 block with hard edges that
the 5x5 filters would learn instead of the strokes). Pixels are scaled to [0, 1] and then standardised by
the training split's mean and standard deviation (one number each, as is usual for MNIST), so the held-out
split leaks nothing into the normalisation. The split is stratified: each class keeps the same held-out
fraction, drawn with a seeded generator.
"""
from __future__ import annotations

import numpy as np

TRAIN_EXTRA = 'pip install -e ".[train]" in the clone (or pip install scikit-learn)'


def bilinear_matrix(size_in: int, size_out: int) -> np.ndarray:
    """M (size_out, size_in) with M @ v the bilinear resampling of v (torch's align_corners=False)."""
    src = np.maximum((np.arange(size_out) + 0.5) * (size_in / size_out) - 0.5, 0.0)
    lo = np.minimum(np.floor(src).astype(int), size_in - 1)
    hi = np.minimum(lo + 1, size_in - 1)
    frac = src - lo
    m = np.zeros((size_out, size_in))
    np.add.at(m, (np.arange(size_out), lo), 1 - frac)
    np.add.at(m, (np.arange(size_out), hi), frac)
    return m


def stratified_split(labels: np.ndarray, test_fraction: float, seed: int):
    """(train indices, test indices): per class, a seeded random ``test_fraction`` of its items is held out."""
    rng = np.random.default_rng(seed)
    train, test = [], []
    for c in np.unique(labels):
        items = rng.permutation(np.flatnonzero(labels == c))
        held = int(round(test_fraction * len(items)))
        test.append(items[:held])
        train.append(items[held:])
    return rng.permutation(np.concatenate(train)), np.sort(np.concatenate(test))


def load_digits(size: int = 32, seed: int = 0, test_fraction: float = 0.2):
    """(x_train, y_train, x_test, y_test): float32 images (N, 1, size, size) and int64 labels 0..9.

    ``size``: the side the 8x8 images are resized to (bilinear; 8 keeps them as they are). ``seed`` draws
    the stratified held-out split of ``test_fraction`` of each class.
    """
    if isinstance(size, bool) or not isinstance(size, int) or size < 8:
        raise ValueError(f"size must be an int >= 8 (the images are 8x8), got {size!r}")
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction!r}")
    try:
        from sklearn.datasets import load_digits as sklearn_digits
    except ImportError:
        raise ImportError(f"the digits data set needs scikit-learn, in the extra 'train': {TRAIN_EXTRA}") from None
    digits = sklearn_digits()
    images, labels = digits.images / 16.0, digits.target.astype(np.int64)
    m = bilinear_matrix(8, size)
    images = np.einsum("ih,nhw,jw->nij", m, images, m, optimize=True)[:, None]
    train, test = stratified_split(labels, test_fraction, seed)
    mean, std = images[train].mean(), images[train].std()
    images = ((images - mean) / std).astype(np.float32)
    return images[train], labels[train], images[test], labels[test]
