# One-command set-up and test. Both targets create .venv when missing and are safe to re-run.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.brefine-installed
# the pinned torch and torchvision (their CUDA build, which also runs on CPU)
TORCH_PINS := torch==2.14.1 torchvision==0.29.1
export PYTHONUNBUFFERED := 1
export MPLBACKEND := Agg
# the real data sets (CamVid, Stanford Background) that notebooks and benchmarks read in place, when present
export BREFINE_DATA ?= $(abspath $(CURDIR)/../shared/data)
# ImageNet weight files (e.g. torchvision's mobilenet_v2-b0353104.pth) that `make install` puts where torchvision's weights API
# finds them offline (torch.hub.get_dir()/checkpoints), when this folder exists; files already there are left alone
export BREFINE_WEIGHTS ?= $(abspath $(CURDIR)/../shared/weights)

.PHONY: disk-check install test check-sync nbtest pytest readme check-readme demo docs bench clean-venv export

# the venv takes ~6.5 GB (torch's CUDA build) and the tests write temporary checkpoints: say so up front when the disk
# is short, so a later 'No space left on device' (seen once in CI) is not a mystery
DISK_NEEDED_GB := 8
disk-check:
	@free=$$(df -Pk . | awk 'NR==2 {print int($$4/1048576)}'); \
	if [ "$$free" -lt $(DISK_NEEDED_GB) ]; then echo "WARNING: $$free GB free here; make test needs about $(DISK_NEEDED_GB) GB (venv + temporary files). Free disk space if it fails with 'No space left on device'." >&2; fi

$(BIN)/python: | disk-check
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(STAMP): $(BIN)/python settings.ini setup.py
	$(BIN)/pip install -q $(TORCH_PINS)
	$(BIN)/pip install -q -e ".[dev]"
	$(BIN)/pip check
	touch $(STAMP)

install: $(STAMP)
	@if [ -d "$(BREFINE_WEIGHTS)" ]; then \
	  hub=$$($(BIN)/python -c 'import torch; print(torch.hub.get_dir())')/checkpoints; mkdir -p "$$hub"; \
	  for f in "$(BREFINE_WEIGHTS)"/*.pth; do [ -e "$$f" ] && [ ! -e "$$hub/$${f##*/}" ] || continue; \
	    cp "$$f" "$$hub/.$${f##*/}.tmp" && mv "$$hub/.$${f##*/}.tmp" "$$hub/$${f##*/}" && echo "$${f##*/} -> $$hub"; done; fi

## (a) brefine/ is what nbdev_export writes from nbs/, notebooks are clean, README is fresh
check-sync: install
	$(BIN)/python tools/check_sync.py

## (b) every notebook runs (cells flagged slow|cuda|camvid are skipped)
nbtest: install
	$(BIN)/nbdev_test --n_workers 2 --timing

## (c) pytest for what notebooks do poorly
pytest: install
	$(BIN)/python -m pytest -q -o tmp_path_retention_policy=failed tests   # passed tests' temporary files go as they pass

test: check-sync nbtest pytest

readme: install
	$(BIN)/python tools/readme.py --write

export: install
	$(BIN)/nbdev_export && $(BIN)/nbdev_clean && $(BIN)/python tools/readme.py --write

## the documentation site, offline (no Quarto): nbdev's notebook processors + nbconvert -> _docs/ (see tools/build_docs.py)
docs: install
	$(BIN)/python tools/build_docs.py

demo: install
	$(BIN)/brefine demo --force

bench: install
	$(BIN)/python bench/speed.py

clean-venv:
	rm -rf $(VENV)
