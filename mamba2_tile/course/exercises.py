"""Make the exercise notebooks in ``notebooks/`` from the complete ones in ``solutions/``.

``solutions/`` is the single source of truth. In its code cells, each solution sits between a
``### BEGIN SOLUTION`` and a ``### END SOLUTION`` line; here that block becomes one
``raise NotImplementedError(...)`` at the same indentation, and every output is cleared, so the
learner starts from a clean notebook whose checks say "not implemented yet" (execution
timestamps go too, so re-running a solution without changing it changes nothing here).

    python -m mamba2_tile.course.exercises           # regenerate notebooks/
    python -m mamba2_tile.course.exercises --check   # exit 1 if notebooks/ is stale
"""

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]   # the repository: solutions/ and notebooks/
BEGIN = "### BEGIN SOLUTION"
END = "### END SOLUTION"
STUB = 'raise NotImplementedError("Exercise: write your code here")'
_MARKER = re.compile(r"^(\s*)(### BEGIN SOLUTION|### END SOLUTION)\s*$")


def strip_solutions(source, where="cell"):
    """Replace each BEGIN/END SOLUTION block in ``source`` by a stub; return the new source."""
    out, indent = [], None
    for number, line in enumerate(source.splitlines(keepends=True), start=1):
        marker = _MARKER.match(line.rstrip("\n"))
        if marker and marker.group(2) == BEGIN:
            if indent is not None:
                raise ValueError(f"{where}, line {number}: {BEGIN} inside another solution")
            indent = marker.group(1)
            out.append(f"{indent}{STUB}\n")
        elif marker:
            if indent is None:
                raise ValueError(f"{where}, line {number}: {END} without {BEGIN}")
            indent = None
        elif indent is None:
            out.append(line)
    if indent is not None:
        raise ValueError(f"{where}: {BEGIN} is never closed by {END}")
    return "".join(out).rstrip("\n")


def exercise_notebook(solution):
    """The exercise version of a solution notebook (a parsed .ipynb dict)."""
    notebook = json.loads(json.dumps(solution))
    notebook["metadata"].pop("widgets", None)
    for index, cell in enumerate(notebook["cells"]):
        if isinstance(cell["source"], list):
            cell["source"] = "".join(cell["source"])
        if cell["cell_type"] != "code":
            continue
        cell["source"] = strip_solutions(cell["source"], where=f"cell {index}")
        cell["metadata"].pop("execution", None)
        cell["outputs"] = []
        cell["execution_count"] = None
    return notebook


def dumps(notebook):
    """Serialise like Jupyter does (one-space indent, sorted keys), so diffs stay small."""
    return json.dumps(notebook, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def expected_exercises(solutions=ROOT / "solutions"):
    """Map each exercise notebook's file name to the text it should have."""
    return {
        path.name: dumps(exercise_notebook(json.loads(path.read_text(encoding="utf-8"))))
        for path in sorted(solutions.glob("*.ipynb"))
    }


def stale_exercises(solutions=ROOT / "solutions", notebooks=ROOT / "notebooks"):
    """Names of the notebooks that are missing, out of date, or have no solution any more."""
    expected = expected_exercises(solutions)
    present = {path.name for path in notebooks.glob("*.ipynb")}
    stale = [name for name, text in expected.items()
             if name not in present or (notebooks / name).read_text(encoding="utf-8") != text]
    return sorted(stale + [name for name in present if name not in expected])


def write_exercises(solutions=ROOT / "solutions", notebooks=ROOT / "notebooks"):
    notebooks.mkdir(exist_ok=True)
    expected = expected_exercises(solutions)
    for name, text in expected.items():
        (notebooks / name).write_text(text, encoding="utf-8")
    for path in notebooks.glob("*.ipynb"):
        if path.name not in expected:
            path.unlink()
    return sorted(expected)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="do not write; exit 1 if notebooks/ differs from what would be written")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_exercises()
        if stale:
            print("notebooks/ is stale; run `python -m mamba2_tile.course.exercises`:", *stale, sep="\n  ")
            return 1
        print("notebooks/ is up to date.")
        return 0
    for name in write_exercises():
        print(f"wrote notebooks/{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
