"""A benchmark's cases timed in fresh processes whose first import is numpy's, torch's or convalgos' (issue 20).

    python -m bench.orders numpy bench.nets --child --models lenet5 --quick    # one child, by hand

Which library loads first decides how the threads of the process wait (``convalgos/threads.py``): numpy's
OpenBLAS, torch's OpenMP and Numba's read their settings once, when they load. Users' programs start with
``import numpy`` (or ``import torch``, which imports numpy), so a benchmark run in one order says nothing of
the others. ``run`` times a case in every order asked:

- one fresh process (a child) per order and round, the orders rotated round by round (numpy, torch, convalgos;
  then torch, convalgos, numpy; ...) so that drift on the shared cores hits every order alike;
- a child is ``python -m bench.orders ORDER MODULE ARGS...``: it imports ORDER's module first (only the
  standard library is loaded before it: ``bench/__init__.py`` imports nothing, nor does this module at its top;
  the child checks), then runs MODULE as ``python -m MODULE ARGS...`` does. The bench module, given
  ``--child``, times its modes in its own interleaved rounds and prints one JSON object, its last line;
- the children start without the variables in ``THREAD_VARIABLES`` (as a user's shell has them), unless
  ``--keep-env``;
- ``merge`` pools the children of one order: samples (lists) are concatenated, anything else is listed child
  by child.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

#: the first import of each order (the name of a module).
ORDERS = ("numpy", "torch", "convalgos")
#: the variables that set how numpy's OpenBLAS and the OpenMP runtimes wait when they load.
THREAD_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OPENBLAS_THREAD_TIMEOUT")
#: what must not be loaded before a child's first import.
HEAVY = ("numpy", "torch", "convalgos", "autotune", "scipy", "numba")
ROOT = Path(__file__).resolve().parent.parent


def add_arguments(ap, rounds: int | None = 3, child: bool = True) -> None:
    """The options every bench run in orders takes (``resolve`` reads them); no --order-rounds where ``rounds``
    is None (one process per order), no --child where the children run another module."""
    ap.add_argument("--orders", default=None, help=f"first imports, comma-separated, each in its own fresh "
                                                   f"processes (default {','.join(ORDERS)}; convalgos with --quick)")
    if rounds is not None:
        ap.add_argument("--order-rounds", type=int, default=None,
                        help=f"fresh processes per order and case, orders rotated (default {rounds}; 1 with --quick)")
    ap.add_argument("--keep-env", action="store_true",
                    help=f"keep {', '.join(THREAD_VARIABLES)} in the children's environment (removed by default)")
    if child:
        ap.add_argument("--child", action="store_true", help="time in this process and print JSON (a child's job)")


def resolve(args, rounds: int = 3) -> None:
    """Fill in the defaults of ``add_arguments``' options (quick runs: convalgos first only, one round)."""
    quick = getattr(args, "quick", False)
    names = args.orders.split(",") if args.orders else ["convalgos"] if quick else list(ORDERS)
    unknown = [n for n in names if n not in ORDERS]
    if unknown or not names:
        raise SystemExit(f"--orders must name some of {', '.join(ORDERS)}; got {args.orders!r}")
    args.orders = names
    args.order_rounds = getattr(args, "order_rounds", None) or (1 if quick else rounds)


def environment(keep_env: bool, extra: dict | None = None) -> dict:
    env = dict(os.environ) if keep_env else {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}
    env.update(extra or {})
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in [env.get("PYTHONPATH")] if p])
    return env


def run_child(order: str, module: str, argv: list, keep_env: bool = False, env: dict | None = None) -> dict:
    """The JSON object that ``python -m MODULE ARGV`` prints, run in a fresh process that imported ``order``'s
    module first (``env``: variables to set in it)."""
    command = [sys.executable, "-m", "bench.orders", order, module, *argv]
    done = subprocess.run(command, env=environment(keep_env, env), capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command[1:])} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(module: str, argv: list, args, label: str = "", env: dict | None = None) -> dict:
    """order -> the children's JSON objects, ``args.order_rounds`` of them per order in ``args.orders``,
    one fresh process each, the orders rotated round by round."""
    names, got = args.orders, {order: [] for order in args.orders}
    for r in range(args.order_rounds):
        for order in names[r % len(names):] + names[:r % len(names)]:
            print(f"  {label} {order} first, round {r + 1}/{args.order_rounds} ...", flush=True)
            got[order].append(run_child(order, module, argv, args.keep_env, env))
    return got


def merge(children: list):
    """One order's children pooled: dicts key by key, lists concatenated (samples), anything else (a count, a
    name) listed child by child."""
    first = children[0]
    if isinstance(first, dict):
        return {k: merge([c[k] for c in children if k in c]) for k in first}
    if isinstance(first, list):
        return [x for c in children for x in c]
    return list(children)


def _plain(value):
    if hasattr(value, "tolist"):                    # numpy scalars and arrays
        return value.tolist()
    if isinstance(value, (set, tuple)):
        return list(value)
    raise TypeError(f"not JSON: {value!r}")


def emit(result: dict) -> None:
    """A child's answer: one JSON line on stdout, the last."""
    print(json.dumps(result, default=_plain), flush=True)


def describe(args) -> str:
    """How the record's processes were started, for its header."""
    env = ("this process's environment" if args.keep_env
           else f"no {', '.join(THREAD_VARIABLES)} in the environment")
    first = ", ".join(args.orders)
    if args.order_rounds == 1:
        return (f"each case in one fresh process per import order ({', '.join(o + ' first' for o in args.orders)}), "
                f"one after the other, so a drift of the machine between them reads as an order's effect; {env}")
    return (f"each case in {args.order_rounds} fresh processes per import order ({first} imported first), the "
            f"orders rotated round by round; {env}")


def main(argv: list) -> None:
    """``python -m bench.orders ORDER MODULE ARGS...``: import ORDER's module first, then run MODULE as
    ``python -m MODULE ARGS...`` would."""
    if len(argv) < 2 or argv[0] not in ORDERS:
        raise SystemExit(f"usage: python -m bench.orders {{{','.join(ORDERS)}}} MODULE ARGS...")
    loaded = [m for m in HEAVY if m in sys.modules]
    if loaded:
        raise SystemExit(f"bench.orders: {', '.join(loaded)} loaded before the first import ({argv[0]})")
    __import__(argv[0])
    import runpy
    sys.argv = [argv[1], *argv[2:]]
    runpy.run_module(argv[1], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
