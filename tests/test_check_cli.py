"""``python -m convalgos.check module:attr`` in a fresh process, as another project's CI would run it: exit 0 and
what held when every check holds, exit 1 and the smallest failing layer with its reproducing lines when one
fails, exit 2 when the algorithm cannot be loaded."""
import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def check(*args):
    """Run the CLI from the tests folder (so ``kit_algorithms`` is importable, as a user's module would be)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS.parent), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "convalgos.check", *args], cwd=TESTS, env=env,
                          capture_output=True, text=True, timeout=300)


def test_a_correct_algorithm_exits_0_and_prints_what_held():
    done = check("kit_algorithms:CORRECT", "--max-examples", "10", "--seed", "0")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "forward: 10 layers checked" in done.stdout and "agreement     held" in done.stdout
    assert "all checks held on 10 layers" in done.stdout


def test_a_planted_bug_exits_1_with_the_smallest_layer_and_how_to_reproduce_it():
    done = check("kit_algorithms:WrongGroups", "--passes", "forward", "--max-examples", "60", "--seed", "0",
                 "--dtypes", "float32")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "agreement     FAILED" in done.stdout
    assert "smallest failing layer: N1 C2 1x1 -> K2 1x1 g2 float32" in done.stdout
    assert "p = convalgos.ConvParams(N=1, C=2, H=1, W=1, K=2, R=1, S=1" in done.stdout
    assert "convalgos.testing.check_layer(alg, 'forward', p, seed=0, checks=['agreement'])" in done.stdout
    assert "alg = kit_algorithms.WrongGroups()" in done.stdout


def test_a_target_that_is_not_an_algorithm_exits_2():
    done = check("kit_algorithms:Nothing")
    assert done.returncode == 2 and "cannot load kit_algorithms:Nothing" in done.stderr
    done = check("kit_algorithms")
    assert done.returncode == 2 and "module:attr" in done.stderr
