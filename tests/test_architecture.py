"""The package's layers import only downwards (docs/architecture.md).

Every module is parsed, not imported, so an import inside a function counts as much as one at
the top, and nothing needs a GPU. The rules:

* the library (``mamba2_tile/*.py``, ``kernels/``, ``interpreter/``) imports neither the tools
  nor the course;
* the tools import the library, never the course;
* the interpreter imports nothing else from the package (it stands alone);
* the kernels import neither the public API nor the autotuner (those sit above them).
"""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "mamba2_tile"

# (modules the rule applies to, imports they must not make, why)
RULES = [
    (lambda m: not m.startswith(("mamba2_tile.tools", "mamba2_tile.course")),
     ("mamba2_tile.tools", "mamba2_tile.course"), "the library imports neither tools nor course"),
    (lambda m: m.startswith("mamba2_tile.tools"),
     ("mamba2_tile.course",), "the tools never import the course"),
    (lambda m: m.startswith("mamba2_tile.interpreter"),
     lambda name: name.startswith("mamba2_tile") and not name.startswith(
         "mamba2_tile.interpreter"), "the interpreter imports nothing else from the package"),
    (lambda m: m.startswith("mamba2_tile.kernels"),
     ("mamba2_tile.api", "mamba2_tile.autotune"), "the kernels sit below the API and the tuner"),
]


def module_name(path, package=PACKAGE):
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_names(source, module, is_package):
    """Every module ``source`` imports (``from a import b`` counts as ``a.b``, since ``b`` may be
    a module), relative imports resolved against ``module``."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = module.split(".")
                parent = parent[:len(parent) - node.level + (1 if is_package else 0)]
                base = ".".join([*parent, base] if base else parent)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def _forbidden(name, banned):
    if callable(banned):
        return banned(name)
    return any(name == b or name.startswith(b + ".") for b in banned)


def violations(modules):
    """``["module imports name: why", ...]`` for ``{module: (source, is_package)}``."""
    found = []
    for module, (source, is_package) in sorted(modules.items()):
        for applies, banned, why in RULES:
            if not applies(module):
                continue
            for name in sorted(imported_names(source, module, is_package)):
                if _forbidden(name, banned):
                    found.append(f"{module} imports {name}: {why}")
    return found


def package_modules():
    return {module_name(path): (path.read_text(encoding="utf-8"), path.name == "__init__.py")
            for path in sorted(PACKAGE.rglob("*.py"))}


def test_the_layers_import_only_downwards():
    found = violations(package_modules())
    assert not found, "forbidden imports (see docs/architecture.md):\n" + "\n".join(found)


@pytest.mark.parametrize("module, source, expected", [
    ("mamba2_tile.cost", "from mamba2_tile.tools.results import DATA_DIR",
     "mamba2_tile.cost imports mamba2_tile.tools.results"),
    ("mamba2_tile.tools.bench.reporting", "def f():\n    import mamba2_tile.course.plots",
     "mamba2_tile.tools.bench.reporting imports mamba2_tile.course.plots"),
    ("mamba2_tile.interpreter.ops", "from mamba2_tile import tile",
     "mamba2_tile.interpreter.ops imports mamba2_tile.tile"),
    ("mamba2_tile.kernels.compute_out", "from .. import autotune",
     "mamba2_tile.kernels.compute_out imports mamba2_tile.autotune"),
])
def test_a_forbidden_import_is_named(module, source, expected):
    found = violations({module: (source, False)})
    assert found and found[0].startswith(expected)


def test_allowed_imports_pass():
    assert violations({
        "mamba2_tile.course.plots.performance": ("from mamba2_tile.tools.bench import reporting",
                                                 False),
        "mamba2_tile.tools.scaling": ("from mamba2_tile.api import CHUNK_SIZES", False),
        "mamba2_tile.interpreter": ("from .launch import launch", True),
        "mamba2_tile.dispatch": ("from mamba2_tile.interpreter.launch import kernel_function",
                                 False),
    }) == []
