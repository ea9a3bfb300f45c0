"""The long kernel exercises keep a plan in their stubs (issue #16 item 4): in the generated
notebooks, notebook 06's and 07's Exercise 2 read as numbered steps, each a comment saying what
that part must do followed by the line the learner replaces, not one empty 25-line body.
"""

import json
import re
from pathlib import Path

import pytest

from mamba2_tile.course.exercises import STUB

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
STEP = re.compile(r"^\s*# (\d+)\. ", re.MULTILINE)


def _exercise_cell(number, kernel):
    [path] = NOTEBOOKS.glob(f"{number}_*.ipynb")
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    [source] = [cell["source"] for cell in cells
                if cell["cell_type"] == "code" and f"def {kernel}(" in cell["source"]]
    return source


@pytest.mark.parametrize("number, kernel, steps", [
    ("06", "fwd_pass_state_tiled_kernel", 7),
    ("07", "compute_out_chunk_kernel", 6),
])
def test_a_long_stub_is_numbered_steps_each_followed_by_its_stub(number, kernel, steps):
    source = _exercise_cell(number, kernel)
    assert [int(n) for n in STEP.findall(source)] == list(range(1, steps + 1))
    assert source.count(STUB) == steps
    lines = source.splitlines()
    for index, line in enumerate(lines):
        if STUB in line:   # the comment block right above every stub starts with a step number
            above = index - 1
            while lines[above].strip().startswith("#") and not STEP.match(lines[above]):
                above -= 1
            assert STEP.match(lines[above]), f"{kernel}: no step comment above line {index + 1}"
