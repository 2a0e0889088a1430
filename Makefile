# Two entry points a fresh machine needs (python3, pip and make; nothing else):
#   make demo   install trtverify into .venv and run the bundled demo suites (shape_sweep and the new tasks' demos fail on purpose)
#   make test   install trtverify[torch,dev,modelopt] (CPU torch and ModelOpt pinned in constraints/ci.txt), lint
#               (ruff, import contracts) and run every test
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip --disable-pip-version-check -q

.PHONY: demo test venv clean room

$(BIN)/python:
	@# Debian/Ubuntu ship venv without ensurepip unless python3-venv is installed: fall back to the system pip
	$(PYTHON) -m venv $(VENV) 2>/dev/null || { rm -rf $(VENV); $(PYTHON) -m venv --without-pip $(VENV) && $(PYTHON) -m pip --python $(BIN)/python install -q pip; }

venv: $(BIN)/python

demo: $(BIN)/python
	$(PIP) install -e .
	$(BIN)/trtverify run suites/fashion_mnist.yaml
	$(BIN)/trtverify run suites/shapes_detection.yaml
	$(BIN)/trtverify run suites/shapes_segmentation.yaml
	$(BIN)/trtverify run suites/fp16_repair.yaml
	$(BIN)/trtverify run suites/perf_demo.yaml
	$(BIN)/trtverify run suites/modelopt_repair.yaml
	$(BIN)/trtverify run suites/plugins_detection.yaml
	$(BIN)/trtverify run suites/shapes_captured.yaml
	@echo "depth.yaml fails on purpose (exit 1): its INT8 candidate was calibrated on near scenes only (demo/depth/README.md)"
	$(BIN)/trtverify run suites/depth.yaml; test $$? -eq 1
	@echo "shape_sweep.yaml fails on purpose (exit 1): its export is right at batch 1 only (demo/shape_sweep/README.md)"
	$(BIN)/trtverify run suites/shape_sweep.yaml; test $$? -eq 1
	@echo "regression.yaml fails on purpose (exit 1): its naive FP16 candidate overflows on pascals (demo/regression/README.md)"
	$(BIN)/trtverify run suites/regression.yaml; test $$? -eq 1
	@echo "compare.yaml fails on purpose (exit 1): its planted FP16 candidate overflows on some images (demo/compare/README.md)"
	$(BIN)/trtverify run suites/compare.yaml; test $$? -eq 1
	@echo "restoration.yaml fails on purpose (exit 1): its plain FP16 conversion overflows (demo/restoration/README.md)"
	$(BIN)/trtverify run suites/restoration.yaml; test $$? -eq 1
	@echo "keypoints.yaml fails on purpose (exit 1): its fp16_overflow candidate overflows FP16 at the heatmap peaks (demo/keypoints/README.md)"
	$(BIN)/trtverify run suites/keypoints.yaml; test $$? -eq 1

test: $(BIN)/python
	$(PIP) install -c constraints/ci.txt -e '.[torch,dev,modelopt]'
	$(BIN)/ruff check trtverify tests bench demo
	$(BIN)/ruff format --check trtverify tests bench demo
	$(BIN)/lint-imports
	@# in parallel, a worker per core (at most 4): 527 s instead of 851 s on CI's 2 cores
	$(BIN)/python -m pytest -n auto --maxprocesses 4

# one room's tests, e.g. `make room R=buildlog` or `make room R=stages/layerwise` (a folder of tests/, mirroring
# trtverify's packages; a folder holding others runs them all), without reinstalling: for the edit-test loop
room: $(BIN)/python
	@test -n "$(R)" -a -d "tests/$(R)" || { echo "make room R=NAME: NAME one of: $$(cd tests && find . -name 'test_*.py' -printf '%h\n' | sed 's|^\./||' | sort -u | tr '\n' ' ')"; exit 2; }
	$(BIN)/python -m pytest -q -n auto --maxprocesses 4 tests/$(R)

clean:
	rm -rf $(VENV) reports/*/ .pytest_cache
