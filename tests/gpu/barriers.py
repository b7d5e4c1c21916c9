"""The simulator's ``syncthreads`` is a barrier of Python threads, and each wait costs up to the interpreter's
thread switch interval (5 ms by default): the fused layers' block reductions (BatchNorm, the loss) took ~4 s per
launch at ResNet-20's 64 channels. A shorter interval while a test module runs cuts that ~20x; results are
unchanged (the barrier's order is the same)."""
import sys

import pytest

#: the switch interval under which the reductions' tests run (seconds)
SWITCH_INTERVAL = 1e-4


@pytest.fixture(autouse=True, scope="module")
def quick_barriers():
    saved = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL)
    yield
    sys.setswitchinterval(saved)
