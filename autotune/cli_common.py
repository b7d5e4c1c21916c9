"""What the two command lines (``python -m autotune`` and ``python -m autotune train``) share: option types,
the JSON output, and Ctrl-C: it always lands, and prints one line."""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys

import autotune

from . import cache


def positive_int(text: str) -> int:
    value = int(text) if text.lstrip("-").isdigit() else None
    if value is None or value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
    return value


def non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {text!r}")
    return value


def write_json(path: str, doc: dict) -> None:
    """``doc`` as JSON into ``path``, or onto stdout for "-"."""
    if path == "-":
        json.dump(doc, sys.stdout, indent=1, default=str)
        sys.stdout.write("\n")
    else:
        with open(path, "w") as f:
            json.dump(doc, f, indent=1, default=str)


#: seconds after a Ctrl-C before it is raised again, should the first have been swallowed
AGAIN_AFTER = 0.2


_LLVMLITE = f"{os.sep}llvmlite{os.sep}"


def inside_llvm(frame) -> bool:
    """Whether llvmlite's Python code is on the stack: Numba is compiling, and LLVM may have called back into
    Python through ctypes (its object cache asks for a compiled module that way). An exception raised in such
    a callback is printed as ignored, the callback returns nothing, and LLVM then reads a buffer that was
    never written: the process dies of SIGSEGV (seen in CI: exit -11 instead of 130)."""
    while frame is not None:
        if _LLVMLITE in frame.f_code.co_filename:
            return True
        frame = frame.f_back
    return False


@contextlib.contextmanager
def ctrl_c_lands():
    """Within the block, Ctrl-C raises KeyboardInterrupt, and again every AGAIN_AFTER seconds until
    ``interrupted`` runs. Python raises a signal's exception at whatever bytecode comes next, and when that is
    inside a finalizer (``__del__``, run by the garbage collector at any moment) the exception is reported as
    ignored and the program goes on: seen here as one Ctrl-C in ~15 that left training running to its end.
    While llvmlite is on the stack (``inside_llvm``) the exception waits for the next repeat instead. A swallowed
    one is not reported ("Exception ignored ... Traceback", seen in CI under Numba's weakref callbacks): the
    repeat lands it; any other ignored exception is reported as before."""
    def raise_interrupt(signum, frame):
        signal.setitimer(signal.ITIMER_REAL, AGAIN_AFTER)
        if not inside_llvm(frame):
            raise KeyboardInterrupt

    def report_unless_interrupt(unraisable):
        if unraisable.exc_type is not KeyboardInterrupt:
            old_hook(unraisable)
    old = signal.signal(signal.SIGINT, raise_interrupt), signal.signal(signal.SIGALRM, raise_interrupt)
    old_hook, sys.unraisablehook = sys.unraisablehook, report_unless_interrupt
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGINT, old[0])
        signal.signal(signal.SIGALRM, old[1])
        if sys.unraisablehook is report_unless_interrupt:
            sys.unraisablehook = old_hook


def interrupted(cache_path, resume: str) -> int:
    """Ctrl-C: one line on stderr saying what was kept (the cache entries saved, and where) and how to resume,
    instead of a traceback; exit status 130 (128 + SIGINT), as a shell gives."""
    signal.setitimer(signal.ITIMER_REAL, 0)       # landed: no repeat (``ctrl_c_lands``)
    path = cache_path or os.environ.get("AUTOTUNE_CACHE")
    if cache_path:
        autotune.save(cache_path)                # --cache is saved after the pass: keep what was tuned so far
    if path:
        saved = len(cache.load(path)[0]) if os.path.exists(path) else 0
        kept = (f"{saved} tuned {'entry' if saved == 1 else 'entries'} of this machine kept in {path}; the same "
                f"command {resume}")
    else:
        tuned = sum(e.source == "benchmark" for e in autotune.dispatch_table())
        kept = (f"{tuned} key(s) tuned in this run, kept nowhere: --cache PATH (python -m autotune) or "
                f"AUTOTUNE_CACHE=PATH keeps them for the next run")
    print(f"interrupted: {kept}", file=sys.stderr)
    # A compilation cut short leaves llvmlite objects whose __del__ fails when the interpreter exits, each
    # printing "Exception ignored ... Traceback" after this line: that is not the user's to read.
    sys.unraisablehook = lambda unraisable: None
    return 130
