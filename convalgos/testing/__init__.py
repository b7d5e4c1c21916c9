"""convalgos.testing: property tests for any convolution algorithm, yours included.

Write an algorithm (a ``convalgos.Algorithm`` subclass: ``name``, the passes it implements, ``supports``
through ``constraints``, ``workspace_bytes``, ``tolerance``), then::

    from convalgos.testing import check_algorithm
    print(check_algorithm(MyAlgorithm()))            # or: python -m convalgos.check mymodule:MyAlgorithm

It draws layers the algorithm supports (hypothesis, steered by probing ``supports``) and checks on each, per
pass: agreement with the float64 reference within the algorithm's own tolerance, the adjoint identities that
tie the passes, that every output element is written, that ``supports`` is honest, that the declared
workspace bounds what is allocated, and that ``deterministic = True`` means the same bits every run. A
failure raises ``CheckFailure`` with hypothesis's smallest failing layer and the line that reproduces it.
The algorithm need not be registered.

The parts, each usable alone:

- ``layers(**constraints)``: a hypothesis strategy of ``ConvParams`` (``strategies.py``);
  ``operands(p, op, seed)`` and ``layer_arrays(p, seed)``: the seeded arrays of a layer;
- ``assert_conv_close`` and ``conv_error``: the normwise measure with its cancellation-safe scale
  (``closeness.py``);
- ``check_layer(algorithm, op, p, seed)``: every check on one layer (``properties.py``, ``adjoint.py``);
- ``check_algorithm``: all of it on drawn layers (``check.py``, ``steering.py``, ``results.py``);
- hypothesis profiles ``convalgos`` (100 layers per pass), ``convalgos-quick`` and ``convalgos-thorough``
  (``profiles.py``).

Needs hypothesis, which ``import convalgos`` does not: ``pip install "convalgos[testing]"`` (or the ``test``
extra).
"""
from .check import check_algorithm
from .closeness import assert_conv_close, conv_error
from .errors import CheckError
from .profiles import PROFILES, kit_settings
from .properties import CHECKS, WORKSPACE_ALLOWANCE, check_layer
from .results import CheckFailure, CheckResult, Counterexample, PassResult
from .strategies import layer_arrays, layers, operands

__all__ = ["check_algorithm", "check_layer", "layers", "operands", "layer_arrays", "assert_conv_close",
           "conv_error", "CheckError", "CheckFailure", "CheckResult", "PassResult", "Counterexample", "CHECKS",
           "WORKSPACE_ALLOWANCE", "PROFILES", "kit_settings"]
