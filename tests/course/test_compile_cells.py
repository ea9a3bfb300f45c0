"""The notebook cells that compile kernels work where cuda-tile does not install.

Without cuda-tile, `compile_kernel` raises a `CompileError` whose message is one line; a cell that
picks lines out of `str(err)` crashed there (issue #17). Such cells print `err.summary`, and say
what is skipped through `NO_COMPILER`. `make test-without-cutile` runs every notebook in an
environment without cuda-tile; this test catches the mistake without building one.
"""

from pathlib import Path

import nbformat
import pytest

SOLUTIONS = sorted((Path(__file__).resolve().parents[2] / "solutions").glob("*.ipynb"))


def compile_cells(path):
    cells = nbformat.read(path, as_version=4).cells
    return [cell.source for cell in cells
            if cell.cell_type == "code" and "compile_kernel(" in cell.source]


def test_the_notebooks_that_compile_are_found():
    compiling = [path.stem[:2] for path in SOLUTIONS if compile_cells(path)]
    assert compiling == ["04", "05", "06", "07"]


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda path: path.stem)
def test_compile_cells_print_the_summary_and_never_parse_the_message(path):
    for source in compile_cells(path):
        assert "splitlines" not in source and "str(err)" not in source
        if "except CompileError" in source:
            assert "err.summary" in source or "{err}" in source
        assert "NO_COMPILER" in source or "err.summary" in source
