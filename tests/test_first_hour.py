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


# ---- the README's install commands ------------------------------------------------------------------------
def readme_commands() -> list[str]:
    """Every shell command of README.md: each line of its fenced bash blocks (comments cut) and each inline
    code span that runs pip, split at '&&'."""
    import re
    text = open(os.path.join(ROOT, "README.md")).read()
    lines = [line.split("  #")[0].strip() for block in re.findall(r"```bash\n(.*?)```", text, re.S)
             for line in block.splitlines() if line.strip()]
    lines += [span for span in re.findall(r"`([^`\n]+)`", text) if "pip install" in span]
    return [part.strip() for line in lines for part in line.split("&&")]


def project_installs(commands) -> list[list[str]]:
    """The arguments of every ``pip install`` of this project (a target that is a path or names convalgos)."""
    import shlex
    found = []
    for command in commands:
        words = shlex.split(command)
        if "pip" not in words or words[words.index("pip") + 1:words.index("pip") + 2] != ["install"]:
            continue
        args = words[words.index("pip") + 2:]
        targets = [a for a in args if not a.startswith("-")]
        if any(t.startswith((".", "/", "convalgos")) for t in targets):
            found.append(args)
    return found


def test_readme_installs_the_project_once_in_one_place():
    """Numba's cache is per file location: every install of this project is editable, from the clone's root,
    so adding an extra never moves the package (a plain ``pip install .`` would copy it into site-packages)."""
    installs = project_installs(readme_commands())
    assert len(installs) >= 5                       # main job, tests, train, notebooks, the GPU extras
    for args in installs:
        targets = [a for a in args if not a.startswith("-")]
        assert "-e" in args and len(targets) == 1, args
        assert targets[0] == "." or (targets[0].startswith(".[") and targets[0].endswith("]")), args


def test_readme_first_commands_are_the_main_job_then_the_tests_which_ci_runs():
    first, second = (line for line in open(os.path.join(ROOT, "README.md")).read().split("```bash\n")[1]
                     .split("```")[0].splitlines())
    assert first.split("#")[0].strip().endswith("python -m autotune")
    assert "python -m pytest -q" in second
    assert second in open(os.path.join(ROOT, ".ci", "run")).read().splitlines()


# ---- Ctrl-C during tuning ---------------------------------------------------------------------------------
def interrupt_once_started(args, started, env=None, timeout=120):
    """Run ``python -m autotune *args``, send SIGINT once ``started(stderr so far)`` holds (tuning has begun),
    and return (exit status, stderr)."""
    import select
    import signal
    import time
    env = dict(os.environ, PYTHONPATH=ROOT, **(env or {"AUTOTUNE_CACHE": ""}))
    proc = subprocess.Popen([sys.executable, "-m", "autotune", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    err, deadline = b"", time.monotonic() + timeout
    try:
        while not started(err.decode(errors="replace")):
            assert time.monotonic() < deadline and proc.poll() is None, err.decode(errors="replace")
            if select.select([proc.stderr], [], [], 0.05)[0]:
                err += os.read(proc.stderr.fileno(), 65536)
        proc.send_signal(signal.SIGINT)
        rest = proc.communicate(timeout=30)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, (err + rest).decode(errors="replace")


def entries(kept: list) -> str:
    return f"{len(kept)} tuned {'entry' if len(kept) == 1 else 'entries'}"


def last_line(stderr: str) -> str:
    """The last line written, after the progress bar's carriage returns."""
    return stderr.replace("\r", "\n").strip().splitlines()[-1]


def test_ctrl_c_while_tuning_prints_what_was_kept_and_exits_130(tmp_path):
    """Sent once the progress bar has passed a conv (its key is tuned), on a small input (about 2 s, warm)."""
    import json
    import re
    cache = tmp_path / "tuned.json"
    code, err = interrupt_once_started(["--model", "resnet18", "--size", "64", "--cache", str(cache)],
                                       lambda err: re.search(r"tuning:[^\r]*\| *[1-9]\d*/20", err))
    assert code == 130 and "Traceback" not in err, err
    assert not re.search(r"\d\d:\d\d<", err), err        # the bar gives no time-left estimate while tuning
    kept = json.loads(cache.read_text())["entries"]
    assert last_line(err) == (f"interrupted: {entries(kept)} of this machine kept in {cache}; the same "
                              f"command resumes from them: a tuned key is not timed again") and len(kept) >= 1


def test_ctrl_c_while_training_prints_what_was_kept_and_exits_130(tmp_path):
    """Sent once the first tuning of the first epoch is saved (AUTOTUNE_CACHE saves after each)."""
    import json
    import pytest
    pytest.importorskip("sklearn")
    cache = tmp_path / "train.json"
    code, err = interrupt_once_started(["train", "--model", "lenet5", "--epochs", "50"],
                                       lambda err: cache.exists(), {"AUTOTUNE_CACHE": str(cache)})
    assert code == 130 and "Traceback" not in err, err
    kept = json.loads(cache.read_text())["entries"]
    assert last_line(err) == (f"interrupted: {entries(kept)} of this machine kept in {cache}; the same "
                              f"command trains from the start again and reuses them") and len(kept) >= 1


def test_a_ctrl_c_swallowed_by_a_finalizer_lands_later_and_prints_no_traceback(monkeypatch):
    """Python reports an exception raised inside a finalizer as ignored, with a traceback (seen in CI: a Ctrl-C
    landed in one of Numba's weakref callbacks). The repeat lands it; the swallowed one is not printed, and an
    ignored exception of any other kind still is."""
    import gc
    import signal
    import sys
    import time
    import pytest
    from autotune.cli_common import ctrl_c_lands
    reported = []

    def record(unraisable):
        reported.append(unraisable.exc_type)
    monkeypatch.setattr(sys, "unraisablehook", record)

    class CtrlCInFinalizer:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):                       # the handler runs at the next bytecode, here
                pass

    class FailingFinalizer:
        def __del__(self):
            raise ValueError("a finalizer's own fault")
    with pytest.raises(KeyboardInterrupt):
        with ctrl_c_lands():
            CtrlCInFinalizer()
            gc.collect()
            FailingFinalizer()
            time.sleep(2)                               # the repeat, 0.2 s on, lands here
    assert reported == [ValueError] and sys.unraisablehook is record    # the user's hook is back after it


def test_a_ctrl_c_while_llvmlite_is_on_the_stack_lands_once_it_has_returned():
    """LLVM calls back into Python through ctypes while Numba compiles; an exception raised there crashes the
    process (SIGSEGV). A function whose file lies under llvmlite/ stands in for such a callback here."""
    import signal
    import time
    import pytest
    from autotune.cli_common import ctrl_c_lands
    fake = os.path.join(os.sep, "site-packages", "llvmlite", "binding", "callback.py")
    namespace = {}
    exec(compile("def callback(send):\n"
                 "    send()\n"
                 "    import time\n"
                 "    start = time.monotonic()\n"
                 "    while time.monotonic() - start < 0.5:\n"
                 "        pass\n"
                 "    return 'returned'\n", fake, "exec"), namespace)
    returned = []
    with pytest.raises(KeyboardInterrupt):
        with ctrl_c_lands():
            returned.append(namespace["callback"](lambda: os.kill(os.getpid(), signal.SIGINT)))
            time.sleep(2)                               # the repeat, 0.2 s on, lands here
    assert returned == ["returned"]
