"""The exercise generator, and that notebooks/ is what it makes from solutions/."""

import json

import pytest

from mamba2_tile.course.exercises import STUB, exercise_notebook, stale_exercises, strip_solutions


def test_strip_keeps_the_signature_and_indents_the_stub():
    source = (
        "def f(a):\n"
        '    """Doc."""\n'
        "    ### BEGIN SOLUTION\n"
        "    b = a + 1\n"
        "    return b\n"
        "    ### END SOLUTION\n"
        "\n"
        "check(f)"
    )
    assert strip_solutions(source) == f'def f(a):\n    """Doc."""\n    {STUB}\n\ncheck(f)'


def test_strip_handles_several_blocks_and_leaves_other_cells_alone():
    source = "x = 1\n### BEGIN SOLUTION\ny = 2\n### END SOLUTION\nz = 3\n  ### BEGIN SOLUTION\n  w\n  ### END SOLUTION"
    assert strip_solutions(source) == f"x = 1\n{STUB}\nz = 3\n  {STUB}"
    assert strip_solutions("print('hi')") == "print('hi')"


@pytest.mark.parametrize("source, message", [
    ("### BEGIN SOLUTION\nx", "never closed"),
    ("x\n### END SOLUTION", "without"),
    ("### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION", "inside another"),
])
def test_unbalanced_markers_are_refused(source, message):
    with pytest.raises(ValueError, match=message):
        strip_solutions(source)


def test_exercise_notebook_clears_outputs_and_keeps_tags():
    solution = {
        "cells": [
            {"cell_type": "markdown", "metadata": {}, "source": ["# Title"]},
            {"cell_type": "code", "execution_count": 3,
             "metadata": {"tags": ["nbval-ignore-output"], "execution": {"iopub.status.busy": "x"}},
             "outputs": [{"output_type": "stream", "name": "stdout", "text": "hi"}],
             "source": ["def f():\n", "    ### BEGIN SOLUTION\n", "    return 1\n", "    ### END SOLUTION"]},
        ],
        "metadata": {"widgets": {"state": {}}}, "nbformat": 4, "nbformat_minor": 5,
    }
    notebook = exercise_notebook(solution)
    code = notebook["cells"][1]
    assert code["outputs"] == [] and code["execution_count"] is None
    assert code["metadata"] == {"tags": ["nbval-ignore-output"]}
    assert code["source"] == f"def f():\n    {STUB}"
    assert "widgets" not in notebook["metadata"]
    assert solution["cells"][1]["outputs"], "the solution itself must not be modified"


def test_notebooks_folder_is_up_to_date():
    assert stale_exercises() == [], "run `python -m mamba2_tile.course.exercises` and commit notebooks/"


def test_every_solution_has_exercises_and_checks():
    from mamba2_tile.course.exercises import ROOT
    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        code = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
        assert sum(s.count("### BEGIN SOLUTION") for s in code) >= 2, f"{path.name}: < 2 exercises"
