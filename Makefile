# Two commands:  `make lab` opens the course, `make test` runs every test.
# Both create .venv and install the project into it the first time (Python 3.10+ needed).
# torch: the pinned build below is installed first, unless the venv already has a torch;
# on a GPU machine, install your CUDA torch into .venv first (or set TORCH=...).
# `make test` ends with `make test-without-cutile`: the course where cuda-tile has no wheel (macOS).

PYTHON ?= python3
VENV   ?= .venv
TORCH  ?= torch==2.13.0
BIN    := $(VENV)/bin
# A second venv with every requirement but cuda-tile, as on a machine where it does not install.
NO_CUTILE_VENV ?= .venv-no-cutile
NO_CUTILE_BIN  := $(NO_CUTILE_VENV)/bin

.PHONY: lab test test-without-cutile notebooks solutions slides golden clean

$(BIN)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install --quiet "$(TORCH)"
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $@

# The course opens in work/, the learner's git-ignored copy of notebooks/ (only missing notebooks
# are copied in, so updates never overwrite work). As root (containers, JupyterHub images)
# Jupyter needs --allow-root.
lab: $(BIN)/.installed
	$(BIN)/python -m mamba2_tile.course.exercises copy
	$(BIN)/jupyter lab $(if $(filter 0,$(shell id -u)),--allow-root) work/00_welcome.ipynb

test: $(BIN)/.installed
	$(BIN)/python -m pytest tests
	$(BIN)/python -m pytest --nbval solutions
	$(BIN)/python -m pytest --nbval-lax notebooks
	$(MAKE) test-without-cutile

# The requirements come from the project's own metadata (tests/requirements_without_cutile.py);
# the last check makes sure nothing brought cuda-tile in after all.
$(NO_CUTILE_BIN)/.installed: pyproject.toml tests/requirements_without_cutile.py
	test -x $(NO_CUTILE_BIN)/python || $(PYTHON) -m venv $(NO_CUTILE_VENV)
	$(NO_CUTILE_BIN)/python -m pip install --quiet --upgrade pip
	$(NO_CUTILE_BIN)/python -c "import torch" 2>/dev/null || $(NO_CUTILE_BIN)/python -m pip install --quiet "$(TORCH)"
	$(NO_CUTILE_BIN)/python -m pip install --quiet --no-deps -e .
	$(NO_CUTILE_BIN)/python tests/requirements_without_cutile.py > $(NO_CUTILE_VENV)/requirements.txt
	$(NO_CUTILE_BIN)/python -m pip install --quiet -r $(NO_CUTILE_VENV)/requirements.txt
	! $(NO_CUTILE_BIN)/python -c "import cuda.tile" 2>/dev/null
	touch $@

# Outputs of the cells that compile differ there, hence nbval-lax for the solutions too.
test-without-cutile: $(NO_CUTILE_BIN)/.installed
	$(NO_CUTILE_BIN)/python -m pytest -q tests/interpreter tests/course/test_environment.py tests/course/test_compile_cells.py
	$(NO_CUTILE_BIN)/python -m pytest --nbval-lax --nbval-current-env solutions notebooks

# For authors: after editing solutions/, re-execute them, then regenerate the exercises.
solutions: $(BIN)/.installed
	$(BIN)/jupyter nbconvert --to notebook --execute --inplace --ExecutePreprocessor.record_timing=False solutions/*.ipynb

notebooks: $(BIN)/.installed
	$(BIN)/python -m mamba2_tile.course.exercises

# For instructors: one reveal.js deck per notebook, with its outputs, in slides/ (git-ignored).
slides: $(BIN)/.installed
	$(BIN)/python -m mamba2_tile.course.slides

golden: $(BIN)/.installed
	$(BIN)/python -m mamba2_tile.tools.golden

clean:
	rm -rf $(VENV) $(NO_CUTILE_VENV) .pytest_cache .hypothesis
