"""Slides from the notebooks: headings start slides, and each notebook gives one deck."""

import nbformat
import pytest

from mamba2_tile.course import slides


@pytest.mark.parametrize("cell, expected", [
    (nbformat.v4.new_markdown_cell("# 00 · Welcome\n\ntext"), "slide"),
    (nbformat.v4.new_markdown_cell("## 3. The map"), "slide"),
    (nbformat.v4.new_markdown_cell("### Exercise 2\n\nWrite it"), "subslide"),
    (nbformat.v4.new_markdown_cell("#### a small heading"), "-"),
    (nbformat.v4.new_markdown_cell("Text that mentions ## mid-line"), "-"),
    (nbformat.v4.new_code_cell("# a comment, not a heading"), "-"),
])
def test_slide_type(cell, expected):
    assert slides.slide_type(cell) == expected


def test_the_notebook_itself_is_not_changed():
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# T")])
    deck = slides.with_slide_types(notebook)
    assert deck.cells[0].metadata["slideshow"] == {"slide_type": "slide"}
    assert "slideshow" not in notebook.cells[0].metadata


def test_one_html_deck_per_notebook(tmp_path):
    paths = []
    for name in ("00_a.ipynb", "01_b.ipynb"):
        notebook = nbformat.v4.new_notebook(cells=[
            nbformat.v4.new_markdown_cell(f"# {name}"), nbformat.v4.new_code_cell("1 + 1"),
            nbformat.v4.new_markdown_cell("## second slide")])
        nbformat.write(notebook, tmp_path / name)
        paths.append(tmp_path / name)
    written = slides.write_slides(paths, tmp_path / "slides")
    assert [path.name for path in written] == ["00_a.slides.html", "01_b.slides.html"]
    html = written[0].read_text()
    assert "reveal" in html and "second slide" in html
    assert html.count("<section") >= 2


def test_unknown_numbers_are_refused(capsys):
    with pytest.raises(SystemExit):
        slides.main(["42"])
    assert "valid numbers: 00," in capsys.readouterr().err
