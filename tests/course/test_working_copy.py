"""The learner's working copy: `make lab` copies only missing notebooks, `reset` restores one."""

import pytest

from mamba2_tile.course import exercises
from mamba2_tile.course.exercises import copy_missing, reset_notebook


@pytest.fixture
def course(tmp_path):
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    for name in ("00_welcome.ipynb", "05_chunk_cumsum.ipynb", "10_scaling.ipynb"):
        (notebooks / name).write_text(f"fresh {name}")
    return notebooks, tmp_path / "work"


def test_first_copy_creates_the_working_copy(course):
    notebooks, work = course
    assert copy_missing(notebooks, work) == ["00_welcome.ipynb", "05_chunk_cumsum.ipynb", "10_scaling.ipynb"]
    assert (work / "05_chunk_cumsum.ipynb").read_text() == "fresh 05_chunk_cumsum.ipynb"


def test_copy_never_overwrites_the_learners_work(course):
    notebooks, work = course
    copy_missing(notebooks, work)
    (work / "05_chunk_cumsum.ipynb").write_text("my answers")
    (work / "10_scaling.ipynb").unlink()
    (notebooks / "05_chunk_cumsum.ipynb").write_text("updated upstream")
    assert copy_missing(notebooks, work) == ["10_scaling.ipynb"]
    assert (work / "05_chunk_cumsum.ipynb").read_text() == "my answers"


@pytest.mark.parametrize("number", ["05", "5"])
def test_reset_restores_one_notebook_and_keeps_a_backup(course, number):
    notebooks, work = course
    copy_missing(notebooks, work)
    (work / "05_chunk_cumsum.ipynb").write_text("my broken answers")
    (work / "00_welcome.ipynb").write_text("my notes")
    target, backup = reset_notebook(number, notebooks, work, stamp="T1")
    assert target == work / "05_chunk_cumsum.ipynb"
    assert target.read_text() == "fresh 05_chunk_cumsum.ipynb"
    assert backup == work / "05_chunk_cumsum.ipynb.bak-T1"
    assert backup.read_text() == "my broken answers"
    assert (work / "00_welcome.ipynb").read_text() == "my notes"


def test_reset_of_a_notebook_not_yet_copied_needs_no_backup(course):
    notebooks, work = course
    target, backup = reset_notebook("10", notebooks, work)
    assert backup is None and target.read_text() == "fresh 10_scaling.ipynb"


def test_reset_never_overwrites_an_earlier_backup(course):
    notebooks, work = course
    copy_missing(notebooks, work)
    reset_notebook("05", notebooks, work, stamp="T1")
    with pytest.raises(FileExistsError, match="bak-T1"):
        reset_notebook("05", notebooks, work, stamp="T1")
    assert (work / "05_chunk_cumsum.ipynb.bak-T1").exists()


@pytest.mark.parametrize("number", ["11", "x", "", "005"])
def test_reset_refuses_unknown_numbers_listing_the_valid_ones(course, number):
    notebooks, work = course
    with pytest.raises(ValueError, match="valid numbers: 00, 05, 10"):
        reset_notebook(number, notebooks, work)
    assert not work.exists() or not any(work.iterdir())


def test_command_line_reset_and_its_error(course, monkeypatch, capsys):
    notebooks, work = course
    monkeypatch.setattr(exercises, "ROOT", notebooks.parent)
    monkeypatch.setattr(exercises, "WORK", work)
    assert exercises.main(["copy"]) == 0
    assert "copied notebooks/00_welcome.ipynb" in capsys.readouterr().out
    assert exercises.main(["reset", "05"]) == 0
    out = capsys.readouterr().out
    assert "restored work/05_chunk_cumsum.ipynb" in out and "kept as work/05_chunk_cumsum.ipynb.bak-" in out
    with pytest.raises(SystemExit) as exit_:
        exercises.main(["reset", "42"])
    assert exit_.value.code == 2
    assert "valid numbers: 00, 05, 10" in capsys.readouterr().err


def test_check_with_a_subcommand_is_refused(capsys):
    with pytest.raises(SystemExit) as exit_:
        exercises.main(["--check", "reset", "05"])
    assert exit_.value.code == 2
    assert "--check checks notebooks/; it does nothing with reset" in capsys.readouterr().err
