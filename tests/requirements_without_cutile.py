"""Print the project's requirements, its dev extra included, less cuda-tile: one per line.

    pip install --no-deps -e . && python tests/requirements_without_cutile.py > requirements.txt

`make test-without-cutile` installs them into a venv that stands for a machine where cuda-tile
has no wheel (macOS, for one). They are read from the installed project's metadata, so
pyproject.toml stays the only list of dependencies.
"""

import importlib.metadata
import re

PROJECT = "mamba2-tile"
LEFT_OUT = "cuda-tile"
EXTRA = "dev"

_EXTRA_MARKER = re.compile(r"""^extra\s*==\s*['"]([^'"]+)['"]$""")


def requirements_without_cutile(requirements, extra=EXTRA):
    """Metadata requirement strings -> those to install: cuda-tile and other extras left out.

    An extra's requirement carries the marker `extra == "dev"` in the metadata; it is kept, without
    that marker, for `extra` only. Other markers (platforms) are kept for pip to evaluate.
    """
    kept = []
    for requirement in requirements:
        spec, _, marker = (part.strip() for part in requirement.partition(";"))
        name = re.match(r"[A-Za-z0-9_.-]+", spec).group(0).lower().replace("_", "-")
        if name == LEFT_OUT:
            continue
        if "extra" not in marker:
            kept.append(requirement.strip())
            continue
        only_extra = _EXTRA_MARKER.match(marker)
        if only_extra is None:
            raise ValueError(f"cannot tell when to install {requirement!r}: an extra's marker "
                             "must be only `extra == \"name\"`")
        if only_extra.group(1) == extra:
            kept.append(spec)
    return kept


if __name__ == "__main__":
    print(*requirements_without_cutile(importlib.metadata.requires(PROJECT) or []), sep="\n")
