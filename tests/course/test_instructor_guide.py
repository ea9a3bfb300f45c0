"""The instructor guide's times are the notebooks' own: each row of the guide's timing table
states the minutes of that notebook's "**Time.** About N minutes" line, every notebook has a
row, and a schedule slot that runs a whole notebook is at least as long as it.
"""

import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "instructor-guide.md"
TIME_LINE = re.compile(r"\*\*Time\.\*\*\s+About (\d+) minutes")
TABLE_ROW = re.compile(r"^\| (\d{2}) [^|]*\| (\d+) min \|", re.MULTILINE)
CLOCK = re.compile(r"^\d+:\d{2}$")
# a slot that runs part of a notebook says so with one of these words
SHORTENED = re.compile(r"\bEx\.|\bskip\b|\btour\b|\bhomework\b|\bdemo\b|\brecap\b")


def notebook_minutes():
    """{"00": 25, ...}: each solution notebook's stated time, from its first "Time" line."""
    minutes = {}
    for path in sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb")):
        notebook = nbformat.read(path, as_version=4)
        stated = [TIME_LINE.search(cell.source) for cell in notebook.cells
                  if cell.cell_type == "markdown"]
        stated = [match for match in stated if match]
        assert stated, f"{path.name} states no '**Time.** About N minutes' line"
        minutes[path.name[:2]] = int(stated[0].group(1))
    return minutes


def guide_section(heading):
    text = GUIDE.read_text(encoding="utf-8")
    start = text.index(heading)
    following = text.find("\n## ", start + len(heading))
    return text[start:] if following < 0 else text[start:following]


def minutes_of(clock):
    hours, minutes = clock.split(":")
    return 60 * int(hours) + int(minutes)


def schedule_slots(section):
    """(minutes, what) of every slot of the schedule tables in ``section``, one list per day:
    a slot lasts until the next row of its day's column."""
    days = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        for column in range(0, len(cells) - 1, 2):
            if CLOCK.match(cells[column]):
                days.setdefault(column, []).append((minutes_of(cells[column]), cells[column + 1]))
    slots = []
    for rows in days.values():
        slots.append([(end - start, what) for (start, what), (end, _) in zip(rows, rows[1:])])
    return slots


def test_every_notebook_states_its_time():
    assert len(notebook_minutes()) >= 14


def test_the_timing_table_states_each_notebooks_time():
    table = {number: int(minutes) for number, minutes in
             TABLE_ROW.findall(guide_section("## Timings"))}
    assert table == notebook_minutes()


def test_the_total_is_the_sum_of_the_notebooks():
    total = sum(notebook_minutes().values())
    stated = re.search(r"about (\d+)(½?) hours of learner time", guide_section("## Timings"))
    assert stated, "the timing section states no total"
    assert abs(60 * int(stated.group(1)) + 30 * bool(stated.group(2)) - total) <= 15, total


def test_the_slot_reader():
    section = "| 0:00 | 01 a | 0:00 | 03 c |\n| 0:40 | 02 b | 1:00 | end |\n| 1:00 | end | | |"
    assert schedule_slots(section) == [[(40, "01 a"), (20, "02 b")], [(60, "03 c")]]


@pytest.mark.parametrize("heading", ["### One day", "### Two days"])
def test_a_whole_notebook_gets_its_time(heading):
    minutes = notebook_minutes()
    slots = schedule_slots(guide_section("## Schedules").split(heading, 1)[1].split("\n### ")[0])
    assert slots and all(slots)
    for day in slots:
        for length, what in day:
            numbers = [number for number in re.findall(r"\b(\d{2})\b", what) if number in minutes]
            if numbers and not SHORTENED.search(what):
                needed = sum(minutes[number] for number in numbers)
                assert length >= needed, f"{heading}: {what!r} has {length} min, needs {needed}"


def test_the_two_day_schedule_runs_every_notebook():
    section = guide_section("## Schedules").split("### Two days", 1)[1]
    named = {number for day in schedule_slots(section) for _, what in day
             for number in re.findall(r"\b(\d{2})\b", what)}
    assert named >= set(notebook_minutes())


def test_every_notebook_has_its_section():
    """Objectives, sticking points and what to say, per notebook: a ``### NN ·`` heading each."""
    sections = set(re.findall(r"^### (\d{2}) ·", guide_section("## Per notebook"), re.MULTILINE))
    assert sections == set(notebook_minutes())
