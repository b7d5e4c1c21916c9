"""The training loop behind ``python -m autotune train``: a model of ``autotune.models`` trained with
``autotune.optim.SGD`` on a data set of ``autotune.data``, every convolution pass through the dispatcher.

    >>> result = fit("lenet5", "digits", epochs=10)            # benchmark mode on, as in the articles
    >>> result["test_accuracy"], result["epoch_seconds"]

Each epoch shuffles the training split (a generator seeded by ``seed``), takes mini-batches of ``batch_size``
(the last one shorter, as a torch DataLoader without ``drop_last`` gives: a second shape the tuner meets),
runs forward, loss, backward and the SGD step, then measures the held-out accuracy in eval mode. The first
epoch tunes every pass of every layer at each new batch shape; its tuning seconds (the tuner's own count)
are reported apart, so the steady time per epoch shows what the choices bought.

``deterministic=True`` makes the same command give the same numbers, bit for bit: only deterministic
algorithms, and the heuristic chooses them instead of timing (benchmark off), because timings, and so the
choices, differ from run to run. This is torch's advice for cuDNN too (``benchmark=False`` with
``deterministic=True``). The initialisation, the split and the batch order are seeded either way.
"""
from __future__ import annotations

import sys
import time

import numpy as np

import autotune

from . import data, models, nn, optim

#: data set name -> (loader(seed) -> (x_train, y_train, x_test, y_test), the models it suits).
DATASETS = {"digits": (lambda seed: data.load_digits(size=32, seed=seed), ("lenet5",))}


def problem(model_name: str, data_name: str) -> str | None:
    """Why ``model_name`` cannot train on ``data_name`` (naming the option), or None."""
    if data_name not in DATASETS:
        return f"--data {data_name}: unknown data set; known: {', '.join(DATASETS)}"
    if model_name not in DATASETS[data_name][1]:
        return (f"--model {model_name}: does not take {data_name} images; use one of "
                f"{', '.join(DATASETS[data_name][1])}")
    return None


def batches(n: int, batch_size: int, rng) -> list[np.ndarray]:
    """Index arrays of one epoch: a permutation of range(n) cut into batches (the last may be shorter)."""
    order = rng.permutation(n)
    return [order[i:i + batch_size] for i in range(0, n, batch_size)]


def accuracy(model, x, y, batch_size: int) -> float:
    """The fraction of ``x`` that ``model`` classifies as ``y``, in eval mode (the mode is restored)."""
    was_training = model.training
    model.eval()
    right = sum(int((np.argmax(model(x[i:i + batch_size]), axis=1) == y[i:i + batch_size]).sum())
                for i in range(0, len(x), batch_size))
    model.train(was_training)
    return right / len(x)


def train_epoch(model, opt, loss_fn, x, y, batch_size, rng, bar=None) -> tuple[float, float]:
    """One pass over (x, y) in shuffled batches; (mean loss, training accuracy) over the epoch."""
    model.train()
    total_loss, right, seen = 0.0, 0, 0
    for idx in batches(len(x), batch_size, rng):
        logits = model(x[idx])
        loss = loss_fn(logits, y[idx])
        opt.zero_grad()
        model.backward(loss_fn.backward())
        opt.step()
        total_loss += loss * len(idx)
        right += int((np.argmax(logits, axis=1) == y[idx]).sum())
        seen += len(idx)
        if bar is not None:
            bar.update(len(idx))
            bar.set_postfix(loss=f"{loss:.3f}", acc=f"{right / seen:.3f}")
    return total_loss / len(x), right / len(x)


def fit(model_name="lenet5", data_name="digits", *, epochs=10, batch_size=64, lr=0.01, momentum=0.9,
        weight_decay=5e-4, seed=0, deterministic=False, benchmark_limit=None, subset=None, progress=True,
        on_epoch=None) -> dict:
    """Train and evaluate; the results as a JSON-ready dict (``test_accuracy``: the last epoch's held-out
    accuracy, a fraction; ``epoch_seconds``: wall seconds of each epoch's training steps).

    ``benchmark_limit``: the tuner's flag (time at most that many best-ranked candidates per key).
    ``subset``: train on the first ``subset`` images of the shuffled training split only (quick runs).
    ``progress``: a tqdm bar per epoch on stderr, with the loss and accuracy so far. ``on_epoch(record)`` is
    called after each epoch with that epoch's record.
    """
    if problem(model_name, data_name):
        raise ValueError(problem(model_name, data_name))
    load = DATASETS[data_name][0]
    x_train, y_train, x_test, y_test = load(seed)
    if subset is not None:
        x_train, y_train = x_train[:subset], y_train[:subset]
    model = models.get_model(model_name, seed=seed)
    opt = optim.SGD(model, lr=lr, momentum=momentum, weight_decay=weight_decay)
    loss_fn, rng = nn.CrossEntropyLoss(), np.random.default_rng(seed)
    flags = dict(benchmark=not deterministic, deterministic=deterministic, benchmark_limit=benchmark_limit)
    records = []
    with autotune.flags(**flags):
        for epoch in range(1, epochs + 1):
            before = autotune.cache_info()
            bar = _bar(epoch, epochs, len(x_train)) if progress else None
            start = time.perf_counter()
            try:
                loss, train_acc = train_epoch(model, opt, loss_fn, x_train, y_train, batch_size, rng, bar)
                seconds = time.perf_counter() - start
            finally:                                  # Ctrl-C too: the bar leaves no half line behind
                if bar is not None:
                    bar.close()
            tuned = autotune.cache_info()
            test_acc = accuracy(model, x_test, y_test, batch_size)
            after = autotune.cache_info()
            records.append({"epoch": epoch, "seconds": seconds, "loss": loss, "train_accuracy": train_acc,
                            "test_accuracy": test_acc, "keys_new": tuned.misses - before.misses,
                            "tuning_seconds": tuned.tuning_seconds - before.tuning_seconds,
                            "eval_keys_new": after.misses - tuned.misses,
                            "eval_tuning_seconds": after.tuning_seconds - tuned.tuning_seconds})
            if on_epoch is not None:
                on_epoch(records[-1])
    steady = [r["seconds"] for r in records[1:]]
    return {"model": model_name, "data": data_name, "train_size": len(x_train), "test_size": len(x_test),
            "epochs": epochs, "batch_size": batch_size, "lr": lr, "momentum": momentum,
            "weight_decay": weight_decay, "seed": seed, "flags": flags,
            "test_accuracy": records[-1]["test_accuracy"] if records else None,
            "epoch_seconds": [r["seconds"] for r in records],
            "first_epoch_tuning_seconds": records[0]["tuning_seconds"] if records else 0.0,
            "steady_epoch_seconds": float(np.median(steady)) if steady else None,
            "train_loss": [r["loss"] for r in records], "epochs_detail": records,
            "choices": choices(model)}


def choices(model) -> list[dict]:
    """Per conv layer (known by its weight's shape) and pass, what the table chose, for each shape met."""
    names = {}
    for name, conv in nn.conv_layers(model):
        names.setdefault(conv.weight.shape, []).append(name)
    return [{"layers": names[e.key.params.weight_shape], "pass": e.key.op, "shape": str(e.key.params),
             "algo": e.algo, "source": e.source}
            for e in autotune.dispatch_table() if e.key.params.weight_shape in names]


def epoch_line(r: dict) -> str:
    """An epoch's record in one line, its tuning (the first epoch's) shown apart."""
    tuning = f" (of which tuning {r['tuning_seconds']:.2f} s, {r['keys_new']} new key(s))" if r["keys_new"] else ""
    return (f"epoch {r['epoch']:>3}: {r['seconds']:7.2f} s{tuning}  loss {r['loss']:.4f}  "
            f"train acc {r['train_accuracy']:.4f}  held-out acc {r['test_accuracy']:.4f}")


def result_line(result: dict) -> str:
    steady = result["steady_epoch_seconds"]
    return (f"held-out accuracy {result['test_accuracy']:.4f} ({result['test_size']} images); first epoch "
            f"{result['epoch_seconds'][0]:.2f} s of which tuning {result['first_epoch_tuning_seconds']:.2f} s"
            + (f", then {steady:.2f} s per epoch (median)" if steady is not None else ""))


def _bar(epoch, epochs, n):
    """The epoch's bar; the first epoch's tunes, so it gives no time-left estimate (``profile.NO_ESTIMATE``)."""
    from tqdm import tqdm
    from .profile.layers import NO_ESTIMATE
    return tqdm(total=n, desc=f"epoch {epoch}/{epochs}", unit="img", file=sys.stderr, leave=False,
                bar_format=NO_ESTIMATE if epoch == 1 else None)
