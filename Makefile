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
	$(BIN)/pip install -q --disable-pip-version-check --no-deps lerobot==0.4.4 gym-pusht==0.1.8 -e .
	touch $(STAMP)

setup: $(STAMP)

# The main job: record "hardware logs" of three scripted policies of different skill in the reference world
# (2 ID + 2 OOD episodes each, three views), replay them open-loop in the world model committed under
# assets/ (trained by benchmarks/train_small.py), evaluate each policy closed-loop in it from its logs'
# episode starts, rank the policies against the logs, and write the HTML report; then rank them again on the
# state path of assets/world_model_coverage (a state head that reads no cameras, learned from coverage data,
# made by `bash benchmarks/coverage.sh chosen`), in a minute. Last, two camera-only policies (the held-out
# `camera` controller of benchmarks/families/, nominal and with its top camera believed 3.5 cm off), which
# never read the cube's pose, are recorded and ranked on the video path: the path real ALOHA policies need;
# and again with the frames drawn from the coverage head's state and the logged cube poses ignored (read
# from the first frames). Re-running resumes.
DEMO := outputs/demo
WORLD_MODEL ?= assets/world_model_small
STATE_MODEL ?= assets/world_model_coverage
DEMO_POLICIES := nominal noisy sloppy
demo: setup
	for skill in $(DEMO_POLICIES); do \
		$(BIN)/r2s2r-record --root=$(DEMO)/logs/$$skill --num_episodes=4 --distribution=mixed --seed=1 \
			--workers=2 --world.num_envs=2 --policy.kwargs="{skill: $$skill}" || exit 1; \
	done
	$(BIN)/r2s2r-eval-openloop --checkpoint=$(WORLD_MODEL) --data.root=$(DEMO)/logs/nominal \
		--sampling_steps=1 --videos=1 --output_dir=$(DEMO)/openloop
	$(BIN)/r2s2r-rank --checkpoint=$(WORLD_MODEL) --logs_dir=$(DEMO)/logs --samples_per_start=2 \
		--sampling_steps=1 --batch_size=8 --output_dir=$(DEMO)/rank
	$(BIN)/r2s2r-rank --checkpoint=$(STATE_MODEL) --logs_dir=$(DEMO)/logs --samples_per_start=8 \
		--render=false --batch_size=32 --output_dir=$(DEMO)/rank_state
	for kw in "nominal {}" "camera_shifted {calib_dx: 0.035}"; do set -- $$kw; \
		PYTHONPATH=benchmarks $(BIN)/r2s2r-record --root=$(DEMO)/camera_logs/$$1 --num_episodes=4 \
			--distribution=mixed --seed=1 --workers=2 --world.num_envs=2 \
			--policy.path=families.camera:make_policy --policy.kwargs="$${kw#* }" || exit 1; \
	done
	PYTHONPATH=benchmarks $(BIN)/r2s2r-rank --checkpoint=$(WORLD_MODEL) --logs_dir=$(DEMO)/camera_logs \
		--samples_per_start=2 --sampling_steps=1 --batch_size=8 --output_dir=$(DEMO)/rank_camera
	PYTHONPATH=benchmarks $(BIN)/r2s2r-rank --checkpoint=$(STATE_MODEL) --logs_dir=$(DEMO)/camera_logs \
		--samples_per_start=2 --frames=head --object_poses=false --batch_size=8 --output_dir=$(DEMO)/rank_camera_head
	@echo "report (video path, $(WORLD_MODEL)): $(DEMO)/rank/report.html"
	@echo "report (state path, $(STATE_MODEL)): $(DEMO)/rank_state/report.html"
	@echo "report (camera-only policies, video path, $(WORLD_MODEL)): $(DEMO)/rank_camera/report.html"
	@echo "report (the same, frames drawn from $(STATE_MODEL)'s state, no object poses): $(DEMO)/rank_camera_head/report.html"

test: setup
	$(BIN)/pytest -q -m "not slow and not gpu"

test-all: setup
	$(BIN)/pytest -q

lint: setup
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/ruff check src tests benchmarks

bench: setup
	$(BIN)/python benchmarks/record.py
