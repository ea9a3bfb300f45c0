"""The notebooks' prose must not announce as future a notebook that exists (issue #16 item 3):
a sentence of a markdown cell in solutions/ (the source of notebooks/) that names "notebook NN"
and says it is coming or not written yet fails while solutions/NN_*.ipynb exists.
"""

import re
from pathlib import Path

import nbformat
import pytest

SOLUTIONS = Path(__file__).resolve().parents[2] / "solutions"
FUTURE = re.compile(r"\b(coming|not (?:yet )?written|to be written|will be written|"
                    r"in preparation|planned)\b", re.IGNORECASE)
NOTEBOOK = re.compile(r"\bnotebooks? (\d{2})\b", re.IGNORECASE)


def _existing():
    return {path.name[:2] for path in SOLUTIONS.glob("[0-9][0-9]_*.ipynb")}


def stale_mentions(text, existing):
    """(number, sentence) for each sentence that calls an existing notebook future.

    Each word of the future is pinned on the notebook named nearest to it in its sentence, so
    "as notebooks 05–08 did, ... is planned as notebook 12" is about 12, not 05.
    """
    found = []
    for sentence in re.split(r"(?<=[.!?])\s+|\n\s*\n", text):
        mentions = list(NOTEBOOK.finditer(sentence))
        for future in FUTURE.finditer(sentence) if mentions else ():
            nearest = min(mentions, key=lambda m: min(abs(m.start() - future.end()),
                                                      abs(future.start() - m.end())))
            if nearest.group(1) in existing:
                found.append((nearest.group(1), sentence.strip()))
    return found


def test_the_detector_catches_stale_and_spares_true_announcements():
    existing = {"08", "09"}
    assert stale_mentions("Notebook 09, coming next, makes it fast.", existing) == [
        ("09", "Notebook 09, coming next, makes it fast.")]
    assert stale_mentions("That is for notebook 09 (not written yet).", existing)
    assert not stale_mentions("Notebook 12 is not written yet. Notebook 09 shows exp2.", existing)
    assert not stale_mentions("As notebook 08 showed, the state is small.", existing)
    assert not stale_mentions("As notebooks 08–09 did, it is planned as notebook 12.", existing)


@pytest.mark.parametrize("path", sorted(SOLUTIONS.glob("[0-9][0-9]_*.ipynb")), ids=lambda p: p.name)
def test_prose_does_not_call_an_existing_notebook_future(path):
    existing = _existing()
    notebook = nbformat.read(path, as_version=4)
    stale = [(index, number, sentence)
             for index, cell in enumerate(notebook.cells) if cell.cell_type == "markdown"
             for number, sentence in stale_mentions(cell.source, existing)]
    assert not stale, "\n".join(f"{path.name} cell {index}: notebook {number} exists, but: "
                                f"{sentence!r}" for index, number, sentence in stale)


def test_every_notebook_is_on_the_course_map_and_in_the_readme():
    """A notebook in solutions/ is part of the course: notebook 00's course map has its row and
    the README's table names it."""
    readme = (SOLUTIONS.parent / "README.md").read_text(encoding="utf-8")
    welcome = nbformat.read(SOLUTIONS / "00_welcome.ipynb", as_version=4)
    course_map = "\n".join(cell.source for cell in welcome.cells if cell.cell_type == "markdown"
                           and "course map" in cell.source.lower())
    for path in sorted(SOLUTIONS.glob("[0-9][0-9]_*.ipynb")):
        assert f"| {path.name[:2]} |" in course_map, f"{path.name} is not on 00's course map"
        assert f"`{path.stem}`" in readme, f"{path.name} is not in the README's table"
