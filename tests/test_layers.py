"""The package's layers: every import inside convres points down this order, no private name crosses."""

import ast
import importlib.util
import re
from pathlib import Path

import convres

ROOT = Path(convres.__file__).resolve().parent

#: Every module of the package, bottom layer first (a module may import only those before it).
LAYERS = [
    ["_version", "values", "runtime", "show", "cache", "protocol", "stats"],  # leaves
    ["backprop", "model", "rank"],                                     # the model, spectra
    ["gd", "instances", "data.sources", "data.jena", "data.embeddings", "data.sst2", "data"],
    ["lemmas", "collapse"],                                            # the lemmas, rank collapse
    ["checks", "certify", "width"],                                    # checks, certified bounds, width
    ["theory", "separation"],                                          # the theorems along runs
    ["plotting", "figures"],                                           # figures
    ["experiments.base", "experiments.sim_reruns", "experiments.simulations", "experiments.jena", "experiments.sst2_baselines",
     "experiments.sst2_arms", "experiments.sst2_claims", "experiments.sst2", "experiments.rank_collapse", "experiments.theorem",
     "experiments", "scope"],                                          # experiments
    ["explorers", "committed", "report", "tables"],                    # pages
    ["cli", "__main__", "__init__"],                                   # entry points
]
ORDER = [m for layer in LAYERS for m in layer]


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" and len(parts) > 1 else parts)


def _imports(path: Path):
    """``(target module, imported names)`` of every convres import in ``path``, in functions too."""
    package = ".".join(("convres", *path.relative_to(ROOT).parts[:-1]))  # where a relative import starts
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            full = importlib.util.resolve_name("." * node.level + (node.module or ""), package)
            if not full.startswith("convres"):
                continue
            target = full.removeprefix("convres").lstrip(".")
            names = [a.name for a in node.names]
            submodules = [n for n in names if f"{target}.{n}".lstrip(".") in ORDER]
            for n in submodules:
                yield f"{target}.{n}".lstrip("."), []
            if len(submodules) < len(names):
                yield target, [n for n in names if n not in submodules]
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("convres."):
                    yield a.name.removeprefix("convres."), []


def _modules():
    return {_module_name(p): p for p in ROOT.rglob("*.py")}


def test_every_module_has_a_layer():
    assert sorted(_modules()) == sorted(ORDER), "place new modules in LAYERS"


def test_imports_point_down():
    up = []
    for name, path in _modules().items():
        for target, _ in _imports(path):
            if target not in ORDER or ORDER.index(target) >= ORDER.index(name):
                up.append(f"{name} imports {target}")
    assert not up, up


def test_no_private_name_crosses_a_module():
    crossing = [f"{name} imports {target}.{n}" for name, path in _modules().items()
                for target, names in _imports(path) for n in names
                if n.startswith("_") and not (n.startswith("__") and n.endswith("__"))]
    assert not crossing, crossing


def test_the_package_uses_no_unsafe_loader_or_shell():
    unsafe = re.compile(r"\bpickle\b|torch\.load\(|\beval\(|\bexec\(|shell=True|os\.system\(|os\.popen\(|"
                        r"yaml\.load\(|allow_pickle|extractall\(|\bmarshal\b|trust_remote_code")
    found = [f"{p.name}:{i}: {line.strip()}" for p in sorted(ROOT.rglob("*.py"))
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if unsafe.search(line) and "no pickle" not in line]
    assert found == []


def test_no_test_imports_another_test_module():
    """Shared fixtures live in ``tests/conftest.py``; a test module never imports another one."""
    tests = {p.stem for p in Path(__file__).parent.glob("*.py")}
    found = [f"{p.name} imports {target}" for p in sorted(Path(__file__).parent.glob("test_*.py"))
             for node in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
             for target in ([a.name for a in node.names] if isinstance(node, ast.Import)
                            else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
             if target.removeprefix("tests.") in tests]
    assert found == []
