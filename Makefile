# Two commands:  `make lab` opens the course, `make test` runs every test.
# Both create .venv and install the project into it the first time (Python 3.10+ needed).
# torch: the pinned build below is installed first, unless the venv already has a torch;
# on a GPU machine, install your CUDA torch into .venv first (or set TORCH=...).

PYTHON ?= python3
VENV   ?= .venv
TORCH  ?= torch==2.13.0
BIN    := $(VENV)/bin

.PHONY: lab test notebooks solutions golden clean

$(BIN)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install --quiet "$(TORCH)"
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $@

lab: $(BIN)/.installed
	$(BIN)/jupyter lab notebooks/00_welcome.ipynb

test: $(BIN)/.installed
	$(BIN)/python -m pytest tests
	$(BIN)/python -m pytest --nbval solutions
	$(BIN)/python -m pytest --nbval-lax notebooks

# For authors: after editing solutions/, re-execute them, then regenerate the exercises.
solutions: $(BIN)/.installed
	$(BIN)/jupyter nbconvert --to notebook --execute --inplace --ExecutePreprocessor.record_timing=False solutions/*.ipynb

notebooks: $(BIN)/.installed
	$(BIN)/python -m mamba2_tile.course.exercises

golden: $(BIN)/.installed
	$(BIN)/python -m mamba2_tile.tools.golden

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
