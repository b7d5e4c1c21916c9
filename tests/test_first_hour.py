"""What a newcomer meets first: ``import autotune`` gives its submodules by attribute without importing torch or
CuPy, the README installs the package once in one place, and Ctrl-C during tuning ends in one line."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def python(code: str, timeout=120) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("AUTOTUNE_CACHE", None)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=env)


def test_submodules_by_attribute_after_import_autotune_and_no_torch_or_cupy():
    done = python(
        "import sys, autotune\n"
        "lazy = [m for m in autotune.SUBMODULES if f'autotune.{m}' in sys.modules]\n"
        "net = autotune.models.resnet18(seed=0)\n"
        "print(lazy, type(autotune.nn.Conv2d(3, 4, 3)).__name__, autotune.optim.SGD.__name__,\n"
        "      callable(autotune.profile.summary), callable(autotune.data.load_digits), callable(autotune.train.fit),\n"
        "      sorted(m for m in ('torch', 'cupy') if m in sys.modules), 'models' in dir(autotune))\n"
        "try:\n"
        "    autotune.modles\n"
        "except AttributeError as e:\n"
        "    print(e)\n")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "[] Conv2d SGD True True True [] True"          # nothing imported until used
    assert lines[1] == "module 'autotune' has no attribute 'modles'"


def test_a_misspelt_flag_still_raises_after_a_submodule_is_loaded():
    done = python("import autotune\nautotune.nn\ntry:\n    autotune.benchmrk = True\nexcept AttributeError as e:\n"
                  "    print(e, hasattr(autotune, 'benchmrk'))\n")
    assert done.returncode == 0, done.stderr
    assert "has no flag 'benchmrk'" in done.stdout and done.stdout.strip().endswith("False")
