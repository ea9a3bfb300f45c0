"""Slides for a workshop, made from the complete notebooks: ``make slides``.

    python -m mamba2_tile.course.slides              # solutions/*.ipynb -> slides/*.slides.html
    python -m mamba2_tile.course.slides --out DIR 00 04

Each notebook becomes one reveal.js deck (nbconvert's slides exporter) with its stored outputs.
The notebooks carry no slide metadata, so it is added on the way, on a copy: a markdown cell
that opens with a ``#`` or ``##`` heading starts a new slide, a ``###`` heading a sub-slide
(below it, reached with the down arrow), and every other cell continues the slide it follows.
Long slides scroll. ``slides/`` is git-ignored: the decks are rebuilt, never edited.

A widget output would need the widget JavaScript from a CDN, so offline (a workshop room, a
laptop on a plane) it shows nothing. The decks therefore carry no widgets: an explorer's output
shows the picture it stored beside the widget (``widgets.Explorer`` stores one for this), and a
widget without a picture is replaced by a line saying it is interactive in JupyterLab.
"""

import argparse
import copy
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_HEADING = re.compile(r"^(#{1,3}) ")
WIDGET = "application/vnd.jupyter.widget-view+json"
INTERACTIVE_ONLY = ("*An interactive widget (sliders) is here: run this notebook in JupyterLab "
                    "to use it.*")


def slide_type(cell):
    """"slide", "subslide" or "-" (continue): where ``cell`` goes in the deck."""
    if cell["cell_type"] != "markdown":
        return "-"
    source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
    heading = _HEADING.match(source.lstrip())
    if heading is None:
        return "-"
    return "subslide" if len(heading.group(1)) == 3 else "slide"


def without_widget(output):
    """``output`` as a deck shows it offline: its stored PNG, or a line, instead of a widget."""
    data = output.get("data", {})
    if WIDGET not in data:
        return output
    if "image/png" in data:
        output.data = {key: value for key, value in data.items() if key != WIDGET}
    else:
        output.data = {"text/markdown": INTERACTIVE_ONLY}
    return output


def with_slide_types(notebook):
    """A copy of ``notebook`` (an nbformat node) ready for a deck: ``metadata.slideshow`` set on
    every cell, and no widget left (see the module's docstring), so no widget script either."""
    deck = copy.deepcopy(notebook)
    deck.metadata.pop("widgets", None)
    for cell in deck.cells:
        cell.metadata["slideshow"] = {"slide_type": slide_type(cell)}
        for output in cell.get("outputs", []):
            without_widget(output)
    return deck


def write_slides(paths, out_dir):
    """One ``<name>.slides.html`` per notebook path in ``out_dir``; returns the files written."""
    import nbformat
    from nbconvert import SlidesExporter

    exporter = SlidesExporter()
    exporter.reveal_scroll = True
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for path in paths:
        body, _ = exporter.from_notebook_node(with_slide_types(nbformat.read(path, as_version=4)))
        target = out_dir / f"{path.stem}.slides.html"
        target.write_text(body, encoding="utf-8")
        written.append(target)
    return written


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m mamba2_tile.course.slides",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("numbers", nargs="*", help="notebook numbers (default: all), e.g. 00 04")
    parser.add_argument("--out", type=Path, default=ROOT / "slides", help="output folder (default slides/)")
    args = parser.parse_args(argv)
    notebooks = sorted((ROOT / "solutions").glob("*.ipynb"))
    by_number = {path.name.split("_", 1)[0]: path for path in notebooks}
    unknown = [number for number in args.numbers if number.zfill(2) not in by_number]
    if unknown:
        parser.error(f"no notebook numbered {', '.join(unknown)}; valid numbers: {', '.join(by_number)}")
    paths = [by_number[number.zfill(2)] for number in args.numbers] or notebooks
    for target in write_slides(paths, args.out):
        print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
