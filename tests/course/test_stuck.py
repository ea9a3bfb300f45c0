"""When a learner is stuck (issue #16 item 2): every exercise has a second hint that names a
line or expression and is not one of its check's first hints, a solution that ``reveal`` prints
from solutions/, and a check that points at both after a wrong answer (only then)."""

import ast
import importlib
import inspect
import json
import pkgutil
import re

import numpy as np
import pytest

import mamba2_tile.course.checks as checks_package
from mamba2_tile.course.checks import hint, reveal
from mamba2_tile.course.checks.stuck import SECOND_HINTS, second_hint, solution_code
from mamba2_tile.course.exercises import (BEGIN, END, ROOT, STUB, exercise_solutions,
                                          solved_source)

EXERCISES = sorted(exercise_solutions())


def marked_checks():
    """{exercise id: [(module, check function), ...]} over every check module."""
    found = {}
    for info in pkgutil.iter_modules(checks_package.__path__):
        module = importlib.import_module(f"{checks_package.__name__}.{info.name}")
        for _, fn in inspect.getmembers(module, inspect.isfunction):
            if fn.__module__ == module.__name__ and hasattr(fn, "exercise_id"):
                found.setdefault(fn.exercise_id, []).append((module, fn))
    return found


def string_constants(module):
    """Every string literal of a module's source (its first hints among them)."""
    tree = ast.parse(inspect.getsource(module))
    return [node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)]


def test_the_course_has_its_exercises():
    assert len(EXERCISES) >= 30 and {"02.1", "05.2", "07.3", "11.2"} <= set(EXERCISES)


def test_every_exercise_and_only_they_have_a_second_hint():
    assert sorted(SECOND_HINTS) == EXERCISES


def test_every_exercise_has_exactly_one_check_pointing_at_its_hints():
    found = marked_checks()
    assert sorted(found) == EXERCISES
    assert {i: len(fns) for i, fns in found.items() if len(fns) != 1} == {}


@pytest.mark.parametrize("exercise_id", EXERCISES)
def test_the_second_hint_names_code_and_differs_from_the_first(exercise_id):
    text = second_hint(exercise_id)
    assert text.startswith("Look at") and text.count("`") >= 2
    (module, _), = marked_checks()[exercise_id]
    for first in string_constants(module):
        assert text not in first and (len(first) < 40 or first not in text)


@pytest.mark.parametrize("exercise_id", EXERCISES)
def test_hint_prints_the_second_hint(capsys, exercise_id):
    hint(exercise_id)
    assert capsys.readouterr().out == f"💡 Exercise {exercise_id}: {second_hint(exercise_id)}\n"


def solution_cells():
    """{exercise id: the raw solution cell (with markers)}, read here without the module's help."""
    cells = {}
    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        exercise = None
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            source = "".join(cell["source"])
            heading = re.search(r"^#+ (?:\d+\. )?Exercise (\d+)", source, re.MULTILINE)
            if cell["cell_type"] == "markdown" and heading:
                exercise = heading.group(1)
            elif BEGIN in source and exercise:
                cells[f"{path.name[:2]}.{exercise}"] = source
                exercise = None
    return cells


@pytest.mark.parametrize("exercise_id", EXERCISES)
def test_reveal_prints_the_solution_from_solutions(capsys, exercise_id):
    raw = solution_cells()[exercise_id]
    code = solution_code(exercise_id)
    assert BEGIN not in code and END not in code and STUB not in code
    inside = raw.split(BEGIN, 1)[1].split(END, 1)[0].splitlines()[1:-1]
    assert [line for line in inside if line.strip()] and all(line in code for line in inside)
    reveal(exercise_id)
    out = capsys.readouterr().out
    assert out.startswith(f"# Solution of exercise {exercise_id}") and out.endswith(code + "\n")


def test_an_id_may_leave_out_the_leading_zero(capsys):
    assert solution_code("5.2") == solution_code("05.2")
    hint("7.3")
    assert "Exercise 07.3" in capsys.readouterr().out


@pytest.mark.parametrize("unknown", ["05.9", "99.1", "05", "five.two", "", "05.2.1"])
def test_an_unknown_id_is_a_clear_error(unknown):
    for ask in (hint, reveal, solution_code):
        with pytest.raises(ValueError, match=r"no exercise .*the exercises are 00\.1, 00\.2"):
            ask(unknown)


# --- the check points at them after a wrong answer, and only then -----------------------------

def segsum(a):
    T = a.shape[-1]
    terms = np.where(np.tril(np.ones((T, T), dtype=bool), k=-1), a[..., :, None], 0.0)
    return np.where(np.tril(np.ones((T, T), dtype=bool)), np.cumsum(terms, axis=-2), -np.inf)


def not_written(a):
    raise NotImplementedError("Exercise: write your code here")


STUCK = 'Stuck? hint("02.1") points at the line to look at, reveal("02.1") shows the solution'


def test_a_wrong_answer_points_at_hint_and_reveal(capsys):
    assert not checks_package.quadratic.check_segsum(lambda a: np.tril(segsum(a)))
    out = capsys.readouterr().out.splitlines()
    assert out[-1].strip().startswith(STUCK)
    assert "from mamba2_tile.course.checks import hint, reveal" in out[-1]


@pytest.mark.parametrize("answer", [segsum, not_written])
def test_a_right_or_unwritten_answer_does_not(capsys, answer):
    checks_package.quadratic.check_segsum(answer)
    assert "Stuck?" not in capsys.readouterr().out


# --- how exercises.py finds them -------------------------------------------------------------

def test_solved_source_drops_only_the_markers():
    source = f"def f(a):\n    {BEGIN}\n    return a + 1\n    {END}\n\ncheck(f)"
    assert solved_source(source) == "def f(a):\n    return a + 1\n\ncheck(f)"


def write_notebook(path, cells):
    path.write_text(json.dumps({"cells": [
        {"cell_type": kind, "source": source, "metadata": {}} for kind, source in cells]}))


def test_exercise_solutions_numbers_them_by_heading(tmp_path):
    write_notebook(tmp_path / "05_x.ipynb", [
        ("markdown", "### Exercise 2: the second"),
        ("code", "import math"),
        ("code", f"{BEGIN}\nx = 2\n{END}"),
        ("code", "check(x)"),
    ])
    assert exercise_solutions(tmp_path) == {"05.2": "x = 2"}


def test_a_numbered_section_may_be_the_exercise(tmp_path):
    write_notebook(tmp_path / "12_x.ipynb", [
        ("markdown", "## 2. Exercise 1: the reverse pass"),
        ("code", f"{BEGIN}\nx = 1\n{END}"),
        ("markdown", "## 3. Exercise 2: one gradient\n\n### Exercise 2: `dC`"),
        ("code", f"{BEGIN}\nx = 2\n{END}"),
    ])
    assert exercise_solutions(tmp_path) == {"12.1": "x = 1", "12.2": "x = 2"}


def test_a_solution_outside_an_exercise_is_an_error(tmp_path):
    write_notebook(tmp_path / "05_x.ipynb", [("markdown", "# Intro"),
                                             ("code", f"{BEGIN}\nx = 2\n{END}")])
    with pytest.raises(ValueError, match="05_x.ipynb, cell 1: a solution block with no"):
        exercise_solutions(tmp_path)


def test_reveal_without_the_solutions_says_where_it_looked(tmp_path, monkeypatch):
    from mamba2_tile.course.checks import stuck

    monkeypatch.setattr(stuck, "SOLUTIONS", tmp_path / "solutions")
    with pytest.raises(FileNotFoundError, match="no solution notebooks in .*solutions"):
        reveal("05.2")


def test_a_wrong_kind_of_answer_points_at_them_too(capsys):
    assert not checks_package.recurrence.check_ssd_step(lambda **inputs: None)
    out = capsys.readouterr().out
    assert "❌ ssd_step must return a pair" in out and 'Stuck? hint("01.1")' in out
