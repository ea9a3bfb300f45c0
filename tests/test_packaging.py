"""pyproject.toml and environment.yml declare the same dependencies."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CONDA_TO_PIP = {"pytorch": "torch"}


def normalise(requirement):
    """'cuda-tile[tileiras]>=1.7; marker' -> ('cuda-tile', '>=1.7', 'marker')."""
    requirement = requirement.strip().strip('"')
    requirement, _, marker = requirement.partition(";")
    match = re.fullmatch(r"([A-Za-z0-9_.-]+)(\[[^\]]*\])?\s*(.*)", requirement.strip())
    name = CONDA_TO_PIP.get(match.group(1).lower(), match.group(1).lower())
    return name, match.group(3).replace(" ", ""), marker.strip()


def pyproject_requirements():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = project["dependencies"] + project["optional-dependencies"]["dev"]
    return {normalise(r) for r in requirements}


def environment_requirements():
    text = (ROOT / "environment.yml").read_text()
    entries = [m.group(1) for m in re.finditer(r"^\s*- (.+)$", text.split("dependencies:", 1)[1], re.M)
               if not m.group(1).endswith(":")]
    skip = {"python", "pip", "-e"}
    return {normalise(e) for e in entries if normalise(e)[0] not in skip and not e.startswith("-e")}


def test_the_two_dependency_lists_agree():
    assert pyproject_requirements() == environment_requirements()


def test_cuda_tile_is_limited_to_platforms_with_wheels():
    (marker,) = [m for name, _, m in pyproject_requirements() if name == "cuda-tile"]
    assert "darwin" not in marker and "linux" in marker and "win32" in marker


def test_the_environment_without_cutile_gets_every_other_requirement():
    try:  # tests/ is a plain directory on sys.path, or a package if it gains an __init__.py
        from requirements_without_cutile import requirements_without_cutile
    except ImportError:
        from tests.requirements_without_cutile import requirements_without_cutile
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    dependencies, dev = project["dependencies"], project["optional-dependencies"]["dev"]
    # How the installed metadata spells them: each extra's requirements carry `extra == "..."`.
    metadata = dependencies + [f'{r}; extra == "dev"' for r in dev] + ['sphinx>=7; extra == "docs"']
    kept = requirements_without_cutile(metadata)
    assert kept == [r for r in dependencies if normalise(r)[0] != "cuda-tile"] + dev
    assert len(kept) == len(dependencies) - 1 + len(dev)
    with pytest.raises(ValueError, match="only `extra"):
        requirements_without_cutile(['x; extra == "dev" and sys_platform == "linux"'])
