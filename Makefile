# Two commands do all set-up on a fresh machine:
#   make bench   the embedded default: CPU, 2 local ranks, synthetic CIFAR, no GPU needed
#   make test    system packages (as root), the venv, then the whole test suite
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
MPI_STAMP := $(VENV)/.installed-mpi

.PHONY: bench test test-nvme test-fast lint system docker-test clean options-doc

# pip compiles every module it installs one file at a time (44 s of a 125 s install here); compileall
# does the same on every core (16 s on 2). Its non-zero status comes from files pip skips as well (torch
# ships test helpers in Python 3.12 syntax); that torch's own modules were compiled is checked instead.
$(STAMP): requirements.lock pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --no-compile -r requirements.lock
	$(PY) -m compileall -qq -j 0 $(VENV)/lib || true
	ls $(VENV)/lib/python3*/site-packages/torch/__pycache__/__init__.cpython-*.pyc > /dev/null
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .
	touch $@

bench: $(STAMP)
	$(VENV)/bin/bench --dataset synthetic --model vit-tiny-p4-32 --gpus 2 --steps 40

system:
	bash scripts/install-system.sh

$(MPI_STAMP): $(STAMP) requirements-mpi.lock requirements-test.lock
	$(PY) -m pip install -q -r requirements-mpi.lock -r requirements-test.lock
	touch $@

test: system $(STAMP) $(MPI_STAMP) lint
	$(PY) -m pytest -q -ra --durations=25 -m "not nvme" tests

# The real ZeRO-Infinity run: its first run in a checkout JIT-compiles DeepSpeed's async_io op against
# libaio (3-4 minutes on 2 cores, more than the suite's budget allows); the refusals stay in `make test`.
test-nvme: system $(STAMP) $(MPI_STAMP)
	$(PY) -m pytest -q -ra -m nvme tests

# The layer contracts (.importlinter; bench/README.md says what each folder may import).
lint: $(MPI_STAMP)
	$(VENV)/bin/lint-imports

# Pure unit tests only: seconds, no process started (tests/unit/conftest.py
# fails any unit test that starts one without the `process` marker).
test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not process" tests/unit

# Builds the real docker/Dockerfile on an offline stand-in base and runs bench,
# bench probe and a 2-rank CPU run in it, plain and through docker-compose.
# Minutes and root (starts its own dockerd when none answers): not in `make test`;
# tests/unit/test_images.py checks the same files statically there.
docker-test:
	bash docker/test-build.sh

clean:
	rm -rf $(VENV) results

# docs/options.md from the parsers (tests/unit/test_options_table.py fails when it is out of date).
options-doc:
	PYTHONPATH=$(CURDIR) $(VENV)/bin/python -c "from bench.cli import build_parser, subparsers; \
	from bench.commands.options_table import table; print(table(subparsers(build_parser())), end='')" > docs/options.md
