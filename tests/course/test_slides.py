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


PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


def widget_output(with_png):
    data = {slides.WIDGET: {"model_id": "abc123", "version_major": 2, "version_minor": 0},
            "text/plain": "VBox(children=(IntSlider(value=1),))"}
    if with_png:
        data["image/png"] = PNG
    return nbformat.v4.new_output("display_data", data=data)


def notebook_with_widgets():
    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# Explorers"),
        nbformat.v4.new_code_cell("explorer()", outputs=[widget_output(with_png=True)]),
        nbformat.v4.new_code_cell("chunk_explorer()", outputs=[widget_output(with_png=False)])])
    notebook.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    return notebook


def test_a_widget_with_a_picture_shows_the_picture():
    deck = slides.with_slide_types(notebook_with_widgets())
    assert set(deck.cells[1].outputs[0].data) == {"image/png", "text/plain"}


def test_a_widget_without_a_picture_says_where_it_works():
    deck = slides.with_slide_types(notebook_with_widgets())
    assert deck.cells[2].outputs[0].data == {"text/markdown": slides.INTERACTIVE_ONLY}
    assert "JupyterLab" in slides.INTERACTIVE_ONLY


def test_a_deck_needs_no_widget_script_from_the_network(tmp_path):
    path = tmp_path / "03_w.ipynb"
    nbformat.write(notebook_with_widgets(), path)
    html = slides.write_slides([path], tmp_path / "slides")[0].read_text()
    assert slides.WIDGET not in html
    assert "html-manager" not in html and "embed-amd" not in html
    assert f"data:image/png;base64,{PNG}" in html
    assert "run this notebook in JupyterLab" in html
    assert "VBox(children" not in html


def test_no_widget_of_the_course_reaches_a_deck():
    """The explorers of notebooks 01, 02 and 04 keep their picture; nb03's chunk explorer, which
    stores none, becomes the line; no widget is left in any deck."""
    kept = {}
    for path in sorted((slides.ROOT / "solutions").glob("*.ipynb")):
        notebook = nbformat.read(path, as_version=4)
        deck = slides.with_slide_types(notebook)
        for cell, deck_cell in zip(notebook.cells, deck.cells):
            for output, deck_output in zip(cell.get("outputs", []), deck_cell.get("outputs", [])):
                if slides.WIDGET in output.get("data", {}):
                    kept.setdefault(path.name[:2], []).append("image/png" in deck_output.data)
                assert slides.WIDGET not in deck_output.get("data", {}), path.name
    assert all(kept["01"]) and all(kept["02"]) and all(kept["04"])
    assert kept["03"] == [False]
