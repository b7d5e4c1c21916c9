"""What an algorithm is, and one registry of them per backend.

Training runs three passes per convolution (cuDNN's names in brackets):

- ``forward`` (fwd):            y  = conv(x, w)                  x (N, C, H, W), w (K, C/g, R, S) -> y (N, K, Ho, Wo)
- ``backward_data`` (bwd data): dx = d(sum y*dy)/dx              dy (N, K, Ho, Wo), w            -> dx (N, C, H, W)
- ``backward_filter`` (bwd filter): dw = d(sum y*dy)/dw          x, dy                           -> dw (K, C/g, R, S)

An algorithm answers, for a layer (``ConvParams``) and a pass ``op``:

- ``supports(p, op)``: can it run this pass of this layer? A falsy answer carries a ``.reason`` a person can
  read. The base class answers for the passes an algorithm does not implement and for the workspace cap
  (``workspace_cap()``); an algorithm states its own constraints in ``constraints(p, op)``.
- ``workspace_bytes(p, op)``: extra memory it allocates beyond the operands and the result.
- ``flops(p, op)``: the arithmetic it really does (direct-equivalent FLOPs are ``p.flops`` for every pass).
- ``tolerance_of(op, dtype)``: the normwise error allowed against the float64 reference.
- and computes the pass: ``forward(x, w, p, y)``, ``backward_data(dy, w, p, dx)``, ``backward_filter(x, dy, p,
  dw)``, each writing every element of its contiguous result.

Prepared weights. Some algorithms first turn the weight into a form of their own (Winograd's U = G w G^T,
FFT's kernel spectra), on every call. ``prepare(w, p, op)`` does it once; ``convalgos.run(..., prepared=)``
then skips it until the weights change. Inference amortises the transform; training pays it every step, as
every step changes the weights (measured in the algorithms' docstrings). ``prepare`` returns None where there
is nothing to prepare (the default; backward_filter reads no weight). An algorithm that prepares overrides
the hook ``prepare_weight`` (and ``prepared_for`` when its form depends on more of the layer), and its weight
passes take a keyword ``prepared=None``.

A ``Registry`` is one backend's algorithms by name. Both are listed explicitly, above the families:
``convalgos.algorithms.ALGORITHMS`` (the CPU's, ``convalgos.ALGORITHMS``) and ``convalgos.cuda.ALGORITHMS``,
where an algorithm's GPU twin sits under the same name and answers the same questions for itself. A user's own
algorithm joins with ``register`` and leaves with ``unregister``.
"""
from __future__ import annotations

import abc
from collections import OrderedDict

import numpy as np

from .arrays import array_module
from .memory import GiB, Workspace, workspace_cap
from .params import ConvParams

#: the three passes of training, in the order a training step meets them.
PASSES = ("forward", "backward_data", "backward_filter")
#: the passes that read the weight: the ones a prepared form can serve.
WEIGHT_PASSES = ("forward", "backward_data")
#: torch's name of each pass (``torch.nn.functional.conv2d``, ``torch.nn.grad.conv2d_input``/``conv2d_weight``,
#: which are also convalgos' and autotune's function names) -> the pass.
OP_OF = {"conv2d": "forward", "conv2d_input": "backward_data", "conv2d_weight": "backward_filter"}


class Support:
    """The answer to ``supports``: truthy when the layer can run, else falsy with a ``reason``."""

    __slots__ = ("ok", "reason")

    def __init__(self, ok: bool, reason: str = ""):
        self.ok, self.reason = bool(ok), reason

    def __bool__(self) -> bool:
        return self.ok

    def __repr__(self) -> str:
        return "Support(True)" if self.ok else f"Support(False, {self.reason!r})"


SUPPORTED = Support(True)


def unsupported(reason: str) -> Support:
    return Support(False, reason)


class UnsupportedError(ValueError):
    """Raised by ``conv2d(..., algo=name)`` for a layer that algorithm does not support."""


def check_pass(op: str) -> str:
    if op not in PASSES:
        raise ValueError(f"op must be one of {PASSES}, got {op!r}")
    return op


class Prepared:
    """A weight in one algorithm's own form for one pass of one layer (made by ``Algorithm.prepare``).

    ``data``: the form, which the pass reads instead of transforming the weight; ``made_for``: what it fits,
    the algorithm's name, the pass and the layer fields the form depends on (``Algorithm.prepared_for``).
    ``convalgos.run`` refuses it for anything else. It does not know which weight VALUES it came from: whoever
    holds it must drop it when the weights change.
    """

    __slots__ = ("data", "made_for")

    def __init__(self, data, made_for: dict):
        self.data, self.made_for = data, dict(made_for)

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes)

    def fits(self, algorithm: "Algorithm", p: ConvParams, op: str) -> bool:
        """True when this form serves pass ``op`` of layer ``p`` through ``algorithm`` (a holder that sees a
        new batch size or layer asks this, and prepares again when it is False)."""
        return algorithm.prepared_for(p, op) == self.made_for

    def check(self, algorithm: "Algorithm", p: ConvParams, op: str) -> None:
        """Raise ValueError unless this form fits pass ``op`` of layer ``p`` through ``algorithm``."""
        wanted = algorithm.prepared_for(p, op)
        if wanted != self.made_for:
            differ = "; ".join(f"{field} {self.made_for.get(field)!r}, this call {value!r}"
                               for field, value in wanted.items() if self.made_for.get(field) != value)
            raise ValueError(f"prepared was made for another algorithm, pass or layer ({differ}): prepare it "
                             f"again with {algorithm.name}.prepare(w, p, {op!r})")

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in self.made_for.items())
        return f"<Prepared {self.nbytes} bytes for {fields}>"


class Algorithm(abc.ABC):
    """Base of every convolution algorithm. Subclasses set ``name``, implement ``forward`` and whichever
    backward passes their idea applies to, and state their constraints, workspace and FLOPs per pass.

    ``deterministic``: the result is bitwise repeatable run to run (same input, same thread count).
    ``tolerance``: normwise error max|y - ref| / max|ref| allowed against the float64 reference, per dtype;
    ``tolerances``, when set, gives it per pass (pass -> dtype -> error), as Winograd's grow with the tile.
    """

    name: str = ""
    #: the backend whose arrays it computes on, and whose memory its workspace comes out of ("cpu" or "cuda").
    backend: str = "cpu"
    deterministic: bool = True
    tolerance: dict[str, float] = {"float16": 2e-3, "float32": 5e-6, "float64": 1e-12}
    tolerances: dict[str, dict[str, float]] | None = None

    def __init__(self):
        self.workspace = Workspace()

    # ---- the questions -------------------------------------------------------------------------------------
    def implements(self, op: str) -> bool:
        """True when this algorithm computes pass ``op`` (it defines that method)."""
        check_pass(op)
        return hasattr(type(self), op)

    def supports(self, p: ConvParams, op: str = "forward") -> Support:
        """Can this algorithm run pass ``op`` of layer ``p``? Falsy with a ``.reason`` when not."""
        if not self.implements(op):
            return unsupported(f"{self.name} has no {op} pass")
        support = self.constraints(p, op)
        if not support:
            return support
        need, cap = self.workspace_bytes(p, op), workspace_cap(self.backend)
        if need > cap:
            return unsupported(f"needs {need / GiB:.2f} GiB of workspace, over the cap of {cap / GiB:.2f} GiB "
                               f"(convalgos.set_workspace_cap(bytes) or CONVALGOS_WORKSPACE_CAP to change it)")
        return SUPPORTED

    def constraints(self, p: ConvParams, op: str) -> Support:
        """The algorithm's own limits on layer ``p`` for pass ``op`` (its idea's, not memory's)."""
        return SUPPORTED

    def workspace_bytes(self, p: ConvParams, op: str = "forward") -> int:
        return 0

    def flops(self, p: ConvParams, op: str = "forward") -> int:
        return p.flops

    def tolerance_of(self, op: str, dtype: str) -> float:
        """The normwise error allowed for pass ``op`` in ``dtype`` (``tolerances``, else ``tolerance``)."""
        return (self.tolerances[op] if self.tolerances else self.tolerance)[dtype]

    # ---- prepared weights (module docstring) ---------------------------------------------------------------
    def prepares(self, op: str = "forward") -> bool:
        """True when ``prepare(w, p, op)`` returns a form (the algorithm overrides ``prepare_weight``)."""
        check_pass(op)
        return (op in WEIGHT_PASSES and self.implements(op)
                and type(self).prepare_weight is not Algorithm.prepare_weight)

    def prepare(self, w, p: ConvParams, op: str = "forward") -> "Prepared | None":
        """The weight ``w`` of layer ``p`` in this algorithm's own form for pass ``op``, for
        ``convalgos.run(self, op, a, b, p, prepared=...)`` on every call until the weights change; None when
        the algorithm has nothing to prepare for that pass."""
        if not self.prepares(op):
            return None
        if tuple(w.shape) != p.weight_shape:
            raise ValueError(f"w must have the layer's weight shape {p.weight_shape}, got {tuple(w.shape)}")
        support = self.supports(p, op)
        if not support:
            raise UnsupportedError(f"{self.name} cannot prepare the {op} weight of {p}: {support.reason}")
        w = array_module(w).ascontiguousarray(w, dtype=p.compute_dtype)
        data = self.prepare_weight(w, p, op)
        if isinstance(data, np.ndarray):
            data.flags.writeable = False           # a form that passes only read: no caller can change it
        return Prepared(data, self.prepared_for(p, op))

    def prepare_weight(self, w, p: ConvParams, op: str):
        """Hook: the form of the contiguous weight ``w`` (compute dtype) for pass ``op`` (one of WEIGHT_PASSES),
        a fresh array nothing else writes. The base has none to make (``prepares`` is False)."""
        return None

    def prepared_for(self, p: ConvParams, op: str) -> dict:
        """What a prepared form for pass ``op`` of layer ``p`` depends on: a form fits a call when these match."""
        return {"algorithm": self.name, "op": op, "weight_shape": p.weight_shape, "groups": p.groups,
                "dtype": p.compute_dtype}

    def prepare_bytes(self, p: ConvParams, op: str = "forward") -> int:
        """Memory a prepared form of pass ``op`` holds (0 where there is none)."""
        return 0

    # ---- the passes ----------------------------------------------------------------------------------------
    @abc.abstractmethod
    def forward(self, x, w, p: ConvParams, out) -> None:
        """Write the convolution of contiguous ``x`` (N, C, H, W) and ``w`` (K, C/g, R, S), both in
        ``p.compute_dtype``, into the contiguous ``out`` (N, K, Ho, Wo) of that dtype. No bias; N >= 1."""

    # An algorithm whose idea applies to a backward pass defines it; the base has none (``implements``):
    #   backward_data(self, dy, w, p, out):   the input gradient of dy (N, K, Ho, Wo) and w into out (N, C, H, W)
    #   backward_filter(self, x, dy, p, out): the weight gradient of x and dy into out (K, C/g, R, S)

    def release(self) -> None:
        """Free the workspace kept between calls."""
        self.workspace.release()

    def __repr__(self) -> str:
        return f"<algorithm {self.name}>"


class Registry(OrderedDict):
    """One backend's algorithms: name -> Algorithm, in the order the tests and the autotuner see them. A name
    it does not hold raises a ValueError that lists the names it does."""

    def __init__(self, backend: str, algorithms=()):
        super().__init__()
        self.backend = backend
        for algorithm in algorithms:
            self.register(algorithm)

    def register(self, algorithm: Algorithm) -> Algorithm:
        """Add ``algorithm`` under its name (a name already here is refused, never replaced)."""
        if isinstance(algorithm, type) and issubclass(algorithm, Algorithm):
            raise TypeError(f"algorithm must be a convalgos.Algorithm instance, got the class {algorithm.__name__}: "
                            f"register {algorithm.__name__}()")
        if not isinstance(algorithm, Algorithm):
            raise TypeError(f"algorithm must be a convalgos.Algorithm, got {type(algorithm).__name__}")
        name = algorithm.name
        if not isinstance(name, str) or not name:
            raise ValueError(f"algorithm name must be a non-empty string, got {name!r}")
        if name in self:
            raise ValueError(f"an algorithm named {name!r} is already registered for {self.backend} "
                             f"({self[name]!r}); unregister it first or choose another name")
        if algorithm.backend != self.backend:
            raise ValueError(f"{name} computes on {algorithm.backend!r} arrays; this is the {self.backend!r} "
                             "registry")
        self[name] = algorithm
        return algorithm

    def unregister(self, name: str) -> Algorithm:
        """Remove and return the algorithm named ``name``."""
        algorithm = self.get_algorithm(name)
        del self[name]
        return algorithm

    def get_algorithm(self, name: str) -> Algorithm:
        try:
            return self[name]
        except (KeyError, TypeError):
            raise ValueError(f"algo must be one of {list(self)}, got {name!r}") from None

    def release_workspaces(self) -> None:
        """Free every algorithm's kept workspace."""
        for algorithm in self.values():
            algorithm.release()
