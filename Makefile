# The README's commands. `make demo` installs everything and runs the main job; `make test` installs
# everything and runs the test suite. Both work on a fresh Debian machine with Python 3.11.
PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export MUJOCO_GL ?= egl

.PHONY: setup demo test test-all lint bench

$(STAMP): pyproject.toml requirements/lock.txt tools/install_system_deps.sh
	./tools/install_system_deps.sh
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	DS_BUILD_OPS=0 $(BIN)/pip install -q --disable-pip-version-check -r requirements/lock.txt
	$(BIN)/pip install -q --disable-pip-version-check --no-deps lerobot==0.4.4 -e .
	touch $(STAMP)

setup: $(STAMP)

# The main job: record a little reference-world data (three views), train a world model briefly, replay
# held-out episodes in it, print the scores and where the side-by-side videos are. Re-running resumes.
DEMO := outputs/demo
demo: setup
	$(BIN)/r2s2r-record --root=$(DEMO)/data/train --num_episodes=8 --distribution=mixed --workers=2 \
		--policy.kwargs='{skill: mix}'
	$(BIN)/r2s2r-record --root=$(DEMO)/data/heldout --num_episodes=2 --distribution=mixed --seed=1 \
		--policy.kwargs='{skill: mix}'
	$(BIN)/r2s2r-train --data.root=$(DEMO)/data/train --output_dir=$(DEMO)/train --steps=150 --save_every=50 \
		$(if $(wildcard $(DEMO)/train/checkpoints/last),--resume=true)
	$(BIN)/r2s2r-eval-openloop --checkpoint=$(DEMO)/train/checkpoints/last/pretrained_model \
		--data.root=$(DEMO)/data/heldout --sampling_steps=1 --videos=2 --output_dir=$(DEMO)/openloop

test: setup
	$(BIN)/pytest -q -m "not slow and not gpu"

test-all: setup
	$(BIN)/pytest -q

lint: setup
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/ruff check src tests benchmarks

bench: setup
	$(BIN)/python benchmarks/record.py
