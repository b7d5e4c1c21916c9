"""``python -m convalgos.check module:attr``: the property tests of ``convalgos.testing`` on your algorithm.

``module:attr`` names an algorithm instance, or a class that takes no arguments (it is instantiated), the
way ``module:attr`` names an entry point; the current directory is importable. The algorithm need not be
registered. It prints, per pass, what held on how many layers, then each failure with its smallest layer and
the lines that reproduce it, and exits 1 when a check failed (0 when all held, 2 when the algorithm could not
be loaded), so it can sit in another project's CI::

    python -m convalgos.check mylib.conv:ShiftAndAdd --passes forward --max-examples 200
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys

from . import PASSES

DTYPES = ("float16", "float32", "float64")


def load(target: str):
    """The object ``module:attr`` names (``attr`` may be dotted); a class is instantiated with no arguments.
    Returns (algorithm, the Python expression that makes it)."""
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise ValueError(f"the algorithm must be given as module:attr (e.g. mylib.conv:MyAlgorithm), got {target!r}")
    obj = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    expression = f"{module_name}.{attr}"
    if isinstance(obj, type):
        obj, expression = obj(), expression + "()"
    missing = [name for name in ("name", "implements", "supports", "tolerance_of", "workspace_bytes")
               if not hasattr(obj, name)]
    if missing:
        raise ValueError(f"{target} is not an algorithm (convalgos.Algorithm's interface): it has no "
                         f"{', '.join(missing)}")
    return obj, expression


def parser() -> argparse.ArgumentParser:
    from .testing import CHECKS, PROFILES
    cli = argparse.ArgumentParser(prog="python -m convalgos.check", description=__doc__.splitlines()[0],
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    cli.add_argument("target", help="module:attr of an algorithm instance or class")
    cli.add_argument("--passes", nargs="+", choices=PASSES, help="passes to check (default: all it implements)")
    cli.add_argument("--dtypes", nargs="+", choices=DTYPES, default=["float32", "float64"],
                     help="dtypes of the drawn layers (default: float32 float64)")
    cli.add_argument("--checks", nargs="+", choices=CHECKS, default=list(CHECKS), help="checks to run (default: all)")
    cli.add_argument("--max-examples", type=int, help="layers per pass (default: the profile's, 100)")
    cli.add_argument("--profile", choices=PROFILES, help="hypothesis profile (default: $CONVALGOS_TESTING_PROFILE "
                                                         "or convalgos)")
    cli.add_argument("--seed", type=int, help="fix hypothesis's draws (the same layers every run)")
    return cli


def main(argv=None) -> int:
    try:
        from .testing import CheckFailure, check_algorithm
    except ImportError as error:                 # hypothesis is the kit's one extra dependency
        print(f"convalgos.check needs hypothesis (pip install 'convalgos[testing]'): {error}", file=sys.stderr)
        return 2
    args = parser().parse_args(argv)
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        algorithm, expression = load(args.target)
    except (ImportError, AttributeError, ValueError, TypeError) as error:
        print(f"cannot load {args.target}: {type(error).__name__}: {error}", file=sys.stderr)
        return 2
    module_name = args.target.partition(":")[0]
    try:
        result = check_algorithm(algorithm, passes=args.passes, dtypes=args.dtypes, max_examples=args.max_examples,
                                 checks=args.checks, settings=args.profile, seed=args.seed, name="alg")
    except CheckFailure as failure:
        print(failure.result.describe())
        print(f"\nreproduce a failure: import convalgos, convalgos.testing, {module_name}; alg = {expression}; "
              f"then the p = ... line and the check_layer line above")
        return 1
    print(result.describe())
    print(f"\nall checks held on {sum(r.examples for r in result.passes.values())} layers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
