"""The notebook cells that compile kernels work where cuda-tile does not install.

Without cuda-tile, `compile_kernel` raises a `CompileError` whose message is one line; a cell that
picks lines out of `str(err)` crashed there (issue #17). Such cells print `err.summary`, and say
what is skipped through `NO_COMPILER`. `make test-without-cutile` runs every notebook in an
environment without cuda-tile; this test catches the mistake without building one.
"""

import ast
from pathlib import Path

import nbformat
import pytest

SOLUTIONS = sorted((Path(__file__).resolve().parents[2] / "solutions").glob("*.ipynb"))


def compiles_when_run(source):
    """Does running this cell call compile_kernel? A call inside a function the cell only
    defines (an exercise, whose check handles a missing compiler) does not count."""
    def calls(node, inside_def):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            inside_def = True
        if (not inside_def and isinstance(node, ast.Call)
                and getattr(node.func, "id", getattr(node.func, "attr", None)) == "compile_kernel"):
            return True
        return any(calls(child, inside_def) for child in ast.iter_child_nodes(node))
    return calls(ast.parse(source), False)


def compile_cells(path):
    cells = nbformat.read(path, as_version=4).cells
    return [cell.source for cell in cells
            if cell.cell_type == "code" and compiles_when_run(cell.source)]


def test_a_function_that_compiles_is_not_a_cell_that_compiles():
    assert compiles_when_run("r = compile_kernel(k, args)")
    assert compiles_when_run("if ok:\n    print(compiler.compile_kernel(k, args))")
    assert not compiles_when_run("def f(k):\n    return compile_kernel(k, ()).registers")


def test_the_notebooks_that_compile_are_found():
    compiling = [path.stem[:2] for path in SOLUTIONS if compile_cells(path)]
    assert compiling == ["04", "05", "06", "07", "09"]


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda path: path.stem)
def test_compile_cells_print_the_summary_and_never_parse_the_message(path):
    for source in compile_cells(path):
        assert "splitlines" not in source and "str(err)" not in source
        if "except CompileError" in source:
            assert "err.summary" in source or "{err}" in source
        assert "NO_COMPILER" in source or "err.summary" in source
