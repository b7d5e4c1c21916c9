"""``autotune.cuda_graph`` over a training step on the (simulated) GPU: the step's convs go through the
simulated GPU's tuner, which it puts in graph mode; the first call tunes, the second captures (in the simulator,
the step on the static buffers under the capture's checks), the third replays; the parameters after three graphed
steps equal three eager steps'; reading the loss inside the step is refused. A tiny conv net and im2col first
(the simulator's cheapest, as test_gpu_training.py says) keep it to a fraction of a second."""
import numpy as np
import pytest

import autotune
from autotune import nn, optim
from autotune.nn.device import move, to_host



def tiny_net():
    rng = np.random.default_rng(0)
    return nn.Sequential(nn.Conv2d(1, 2, 1, rng=rng), nn.ReLU(), nn.Flatten(),
                         nn.Linear(2 * 6 * 6, 3, rng=rng)).to("cuda").train()


def train_step_of(model):
    opt, loss_fn = optim.SGD(model, lr=0.1, momentum=0.9), nn.CrossEntropyLoss().to("cuda")

    def train_step(x, labels):
        loss = loss_fn(model(x), labels)
        model.zero_grad()
        model.backward(loss_fn.backward())
        opt.step()
        return loss
    return train_step


def test_a_graphed_training_step_captures_once_and_equals_the_eager_steps(gpu_tuner):
    rng = np.random.default_rng(1)
    batches = [(move(rng.standard_normal((2, 1, 6, 6)).astype(np.float32), "cuda"), np.array([0, 2]))
               for _ in range(3)]
    eager_net, graphed_net = tiny_net(), tiny_net()
    eager, graphed = train_step_of(eager_net), autotune.cuda_graph(train_step_of(graphed_net))
    assert gpu_tuner.graph_mode and graphed.tuners[-1] is gpu_tuner
    for x, labels in batches:
        eager(x, labels)
        graphed(x, labels)
    assert (graphed.eager_calls, graphed.captures, graphed.replays) == (1, 1, 1)
    assert graphed.graph_bytes >= batches[0][0].nbytes + batches[0][1].nbytes
    for name, value in eager_net.state_dict().items():
        assert np.array_equal(to_host(graphed_net.state_dict()[name]), to_host(value)), name


def test_reading_the_loss_inside_a_graphed_step_is_refused(gpu_tuner):
    model = tiny_net()
    train_step = train_step_of(model)
    step = autotune.cuda_graph(lambda x, labels: float(train_step(x, labels)))    # float(loss) inside the step
    x = move(np.random.default_rng(2).standard_normal((2, 1, 6, 6)).astype(np.float32), "cuda")
    step(x, np.array([0, 1]))                                                  # eager: reading is fine
    with pytest.raises(autotune.CaptureError, match="host synchronisation"):
        step(x, np.array([0, 1]))
    assert step.captures == 0
