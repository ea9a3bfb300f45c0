"""Make the exercise notebooks in ``notebooks/`` from the complete ones in ``solutions/``.

``solutions/`` is the single source of truth. In its code cells, each solution sits between a
``### BEGIN SOLUTION`` and a ``### END SOLUTION`` line; here that block becomes one
``raise NotImplementedError(...)`` at the same indentation, and every output is cleared, so the
learner starts from a clean notebook whose checks say "not implemented yet" (execution
timestamps go too, so re-running a solution without changing it changes nothing here).

Learners do not edit ``notebooks/`` (it is tracked, and pulling an update would conflict with
their work): ``make lab`` opens a git-ignored working copy, ``work/``, which only ever gains the
notebooks it is missing; ``reset`` puts one notebook back to its fresh state there.

    python -m mamba2_tile.course.exercises           # regenerate notebooks/
    python -m mamba2_tile.course.exercises --check   # exit 1 if notebooks/ is stale
    python -m mamba2_tile.course.exercises copy      # add missing notebooks to work/
    python -m mamba2_tile.course.exercises reset 05  # restore work/05_*.ipynb, keeping a backup
"""

import argparse
import json
import re
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]   # the repository: solutions/ and notebooks/
WORK = ROOT / "work"                         # the learner's copy; .gitignore lists it
BEGIN = "### BEGIN SOLUTION"
END = "### END SOLUTION"
STUB = 'raise NotImplementedError("Exercise: write your code here")'
_MARKER = re.compile(r"^(\s*)(### BEGIN SOLUTION|### END SOLUTION)\s*$")


def _marked_lines(source, where="cell"):
    """Each line of ``source`` with its role and the indentation of the block it is in:
    ``("begin", indent, line)`` and ``("end", indent, line)`` for the markers, ``"solution"``
    inside a block, ``"code"`` outside. Markers that do not pair up raise ValueError."""
    indent = None
    for number, line in enumerate(source.splitlines(keepends=True), start=1):
        marker = _MARKER.match(line.rstrip("\n"))
        if marker and marker.group(2) == BEGIN:
            if indent is not None:
                raise ValueError(f"{where}, line {number}: {BEGIN} inside another solution")
            indent = marker.group(1)
            yield "begin", indent, line
        elif marker:
            if indent is None:
                raise ValueError(f"{where}, line {number}: {END} without {BEGIN}")
            yield "end", indent, line
            indent = None
        else:
            yield ("code" if indent is None else "solution"), indent, line
    if indent is not None:
        raise ValueError(f"{where}: {BEGIN} is never closed by {END}")


def strip_solutions(source, where="cell"):
    """Replace each BEGIN/END SOLUTION block in ``source`` by a stub; return the new source."""
    out = []
    for role, indent, line in _marked_lines(source, where):
        if role == "begin":
            out.append(f"{indent}{STUB}\n")
        elif role == "code":
            out.append(line)
    return "".join(out).rstrip("\n")


def solved_source(source, where="cell"):
    """``source`` with its solutions in place and the marker lines dropped: the cell as a
    learner who solved the exercise would have written it."""
    return "".join(line for role, _, line in _marked_lines(source, where)
                   if role in ("code", "solution")).rstrip("\n")


# "### Exercise 2: ...", "### Exercise 1 — `segsum`", "## 2. Exercise 1: ...": the heading
# that opens an exercise (a section number may come first).
_EXERCISE_HEADING = re.compile(r"^#+ (?:\d+\.\s*)?Exercise (\d+)\b", re.MULTILINE)


def exercise_solutions(solutions=ROOT / "solutions"):
    """Map each exercise's id to its solved cell: ``{"05.2": source, ...}``.

    The id is the notebook's number and the exercise's, "05.2" for notebook 05's Exercise 2: the
    exercise is the first code cell holding a solution block after a markdown cell headed
    "Exercise 2". A solution block outside any exercise raises ValueError, so that every one
    can be revealed.
    """
    found = {}
    for path in sorted(solutions.glob("*.ipynb")):
        notebook = json.loads(path.read_text(encoding="utf-8"))
        number, current = path.name.split("_", 1)[0], None
        for index, cell in enumerate(notebook["cells"]):
            source = "".join(cell["source"])
            if cell["cell_type"] == "markdown":
                heading = _EXERCISE_HEADING.search(source)
                current = heading.group(1) if heading else current
            elif cell["cell_type"] == "code" and any(
                    role == "begin" for role, _, _ in _marked_lines(source)):
                if current is None:
                    raise ValueError(f"{path.name}, cell {index}: a solution block with no "
                                     "'Exercise N' heading before it")
                found[f"{number}.{current}"] = solved_source(source, f"{path.name}, cell {index}")
                current = None
    return found


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


def copy_missing(notebooks=ROOT / "notebooks", work=WORK):
    """Copy into ``work`` each notebook it does not have yet; never touch one that is there."""
    work.mkdir(exist_ok=True)
    copied = []
    for path in sorted(notebooks.glob("*.ipynb")):
        if not (work / path.name).exists():
            shutil.copyfile(path, work / path.name)
            copied.append(path.name)
    return copied


def reset_notebook(number, notebooks=ROOT / "notebooks", work=WORK, stamp=None):
    """Restore notebook ``number`` (e.g. "05" or "5") in ``work`` from ``notebooks``.

    The learner's version, if any, is renamed to ``<name>.bak-<stamp>`` first, so nothing is
    lost. Returns ``(restored path, backup path or None)``; an unknown number raises ValueError
    listing the valid ones.
    """
    by_number = {path.name.split("_", 1)[0]: path for path in sorted(notebooks.glob("*.ipynb"))}
    key = number.zfill(2) if number.isdigit() else number
    if key not in by_number:
        raise ValueError(f"no notebook numbered {number!r}; valid numbers: {', '.join(by_number)}")
    source = by_number[key]
    target = work / source.name
    work.mkdir(exist_ok=True)
    backup = None
    if target.exists():
        stamp = stamp or time.strftime("%Y%m%d-%H%M%S")
        backup = target.with_name(f"{target.name}.bak-{stamp}")
        if backup.exists():
            raise FileExistsError(f"{backup} already exists; not overwriting a backup")
        target.rename(backup)
    shutil.copyfile(source, target)
    return target, backup


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="do not write; exit 1 if notebooks/ differs from what would be written")
    commands = parser.add_subparsers(dest="command")
    commands.add_parser("copy", help="copy the notebooks missing from work/ (make lab does this)")
    reset = commands.add_parser("reset", help="restore one notebook in work/ from notebooks/, "
                                              "keeping your version as a .bak-<time> file")
    reset.add_argument("number", help="the notebook's number, e.g. 05")
    args = parser.parse_args(argv)
    if args.check and args.command:
        parser.error(f"--check checks notebooks/; it does nothing with {args.command}")
    if args.command == "copy":
        for name in copy_missing(ROOT / "notebooks", WORK):
            print(f"copied notebooks/{name} to work/")
        return 0
    if args.command == "reset":
        try:
            target, backup = reset_notebook(args.number, ROOT / "notebooks", WORK)
        except ValueError as error:
            parser.error(str(error))
        if backup:
            print(f"your version is kept as {backup.relative_to(ROOT)}")
        print(f"restored {target.relative_to(ROOT)} from notebooks/")
        return 0
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
