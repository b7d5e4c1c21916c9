"""The layout the code promises: no import circle in convalgos/ or autotune/ (imports inside functions
included), every registered algorithm in its family's folder, GPU twins that share their family's definitions
instead of restating them, and the contract below the families."""
import ast
import pathlib

import pytest

import convalgos
from convalgos import PASSES, ConvParams
from convalgos import cuda as gpu

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("convalgos", "autotune")
#: the folder of each built-in algorithm's family
FAMILY = {"direct": "direct", "direct_channels": "direct", "depthwise": "depthwise", "implicit_gemm": "implicit_gemm",
          "implicit_gemm_128x64": "implicit_gemm", "implicit_gemm_64x64": "implicit_gemm",
          "implicit_gemm_32x32": "implicit_gemm", "im2col": "im2col",
          "fft": "fft", "fft_tiled": "fft", "winograd_2x2": "winograd", "winograd_4x4": "winograd",
          "winograd_6x6": "winograd", "winograd_fused_4x4": "winograd", "winograd_fused_6x6": "winograd"}
#: GPU-only entries (a tile shape of a family's GPU kernel) -> the CPU algorithm whose definitions they share
GPU_ONLY = {"implicit_gemm_128x64": "implicit_gemm", "implicit_gemm_64x64": "implicit_gemm",
            "implicit_gemm_32x32": "implicit_gemm", "winograd_fused_6x6": "winograd_6x6"}
FAMILIES = sorted(set(FAMILY.values()))
#: the contract: what every family may import, and which imports no family
CONTRACT = ("params", "registry", "passes", "run", "memory", "arrays", "interop", "reference", "gpu_base",
            "gpu_compiler", "gpu_ops", "gemm", "threads")


def module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for package in PACKAGES for p in (ROOT / package).rglob("*.py")}


def imports_of(name: str) -> set:
    """The project modules ``name`` imports anywhere in its file (top level or inside functions)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in MODULES:        # "convalgos.cuda.ALGORITHMS" -> "convalgos.cuda"
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
        if isinstance(node, ast.ImportFrom) and node.level and node.module and base not in MODULES:
            found.add(f"{base} (no such module: {name}, line {node.lineno})")
    return found


GRAPH = {name: imports_of(name) for name in MODULES}


def cycle_from(start: str):
    """An import cycle through ``start`` as a list of modules, or None."""
    stack, seen = [(start, [start])], set()
    while stack:
        node, path = stack.pop()
        for nxt in GRAPH.get(node, ()):
            if nxt == start:
                return path + [start]
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, path + [nxt]))
    return None


def test_the_graph_sees_imports_inside_functions():
    assert "convalgos.cuda" in GRAPH["convalgos.backends"]          # imported inside _gpu_registry
    assert "convalgos.params" in GRAPH["convalgos.direct.cpu"]      # a relative import two levels up


def test_every_relative_import_names_a_module_that_exists():
    broken = [m for imported in GRAPH.values() for m in imported if "no such module" in m]
    assert not broken, broken


def test_no_import_circle():
    cycles = [cycle_from(name) for name in sorted(GRAPH)]
    assert not [c for c in cycles if c], "import circles:\n" + "\n".join(" -> ".join(c) for c in cycles if c)


def test_the_contract_imports_no_family_and_families_import_no_registry():
    for name in CONTRACT:
        families = {m for m in GRAPH[f"convalgos.{name}"] if m.split(".")[1] in FAMILIES + ["kernels"]}
        assert not families, f"convalgos.{name} imports {families}"
    above = {"convalgos", "convalgos.algorithms", "convalgos.cuda", "convalgos.backends", "convalgos.conv"}
    for name, imported in GRAPH.items():
        if name.split(".")[:2][-1] in FAMILIES:
            assert not imported & above, f"{name} imports {imported & above}"
            other = {m for m in imported if m.split(".")[1] in FAMILIES and m.split(".")[1] != name.split(".")[1]}
            assert not other, f"{name} imports another family: {other}"


def test_autotune_uses_convalgos_public_modules_only():
    public = {"convalgos"} | {f"convalgos.{m}" for m in ("passes", "interop", "arrays", "backends", "reference", "cuda",
                                                          "gpu_compiler", "gemm", "testing")}
    for name, imported in GRAPH.items():
        if name.startswith("autotune"):
            private = {m for m in imported if m.startswith("convalgos") and m not in public}
            assert not private, f"{name} imports {private}"


@pytest.mark.parametrize("registry", [convalgos.ALGORITHMS, gpu.ALGORITHMS], ids=["cpu", "cuda"])
def test_each_algorithm_lives_in_its_family_folder(registry):
    for name, algorithm in registry.items():
        module = type(algorithm).__module__
        assert module.startswith(f"convalgos.{FAMILY[name]}."), (name, module)


def test_registries_are_listed_explicitly_in_order():
    assert list(convalgos.ALGORITHMS) == [n for n in FAMILY if n not in GPU_ONLY]
    assert list(gpu.ALGORITHMS) == [n for n in FAMILY if n in gpu.ALGORITHMS]


TWIN_LAYERS = [ConvParams.from_shapes(x, w, **kw) for x, w, kw in [
    ((2, 4, 9, 9), (6, 4, 3, 3), dict(padding=1)),
    ((1, 4, 9, 9), (4, 1, 3, 3), dict(padding=1, groups=4)),
    ((1, 3, 12, 11), (5, 3, 5, 5), dict(padding=2)),
    ((1, 4, 9, 9), (4, 4, 3, 3), dict(stride=2, padding=1)),
    ((1, 2, 11, 11), (2, 2, 3, 3), dict(dilation=2, padding=((2, 1), (0, 2)))),
    ((2, 8, 6, 6), (8, 8, 1, 1), {}),
]]


@pytest.mark.parametrize("name", list(gpu.ALGORITHMS))
def test_twins_share_one_definition_of_tolerance_and_constraints(name):
    cpu, twin = convalgos.ALGORITHMS[GPU_ONLY.get(name, name)], gpu.ALGORITHMS[name]
    assert twin.tolerance is cpu.tolerance and twin.tolerances is cpu.tolerances       # the same objects
    for op in PASSES:
        for dtype in ("float16", "float32", "float64"):
            assert twin.tolerance_of(op, dtype) == cpu.tolerance_of(op, dtype)
    for p in TWIN_LAYERS:
        ops = [op for op in PASSES if twin.implements(op)]
        for op in ops:
            mine, theirs = cpu.constraints(p, op), twin.constraints(p, op)
            assert bool(mine) == bool(theirs), (p, op, mine, theirs)      # the same reason, under its own name
            assert mine.reason.replace(cpu.name, twin.name) == theirs.reason, (p, op, mine, theirs)
