# onceproof: two commands do all set-up.
#   make run   – create .venv, install, resolve jars, run the default test on a local cluster
#   make test  – the test suite (unit + real-cluster integration)
PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin

CHROMIUM ?= /usr/bin/chromium
SUDO   := $(if $(filter 0,$(shell id -u)),,sudo)

.PHONY: setup run test unit bench soak clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml deps/kafka/pom.xml deps/spark-kafka/pom.xml
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) (Python 3.11)"; exit 1; }
	@command -v java >/dev/null || { echo "need Java 17+ on PATH"; exit 1; }
	@command -v mvn >/dev/null || { echo "need Maven (mvn) on PATH"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	$(BIN)/onceproof deps
	touch $@

run: setup
	$(BIN)/onceproof run --sink eos --nemesis kill-executor,kill-driver-in-commit-window --time-limit 60 --seed 1

# tests/test_report.py renders report.html in headless Chromium (Debian's package)
$(CHROMIUM):
	@command -v apt-get >/dev/null || { echo "need Chromium at $(CHROMIUM): install your distribution's chromium"; exit 1; }
	$(SUDO) apt-get update -q
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium

test: setup $(CHROMIUM)
	$(BIN)/python -m pytest -v -rA --durations=0

unit: setup $(CHROMIUM)
	$(BIN)/python -m pytest -v -m "not cluster"

bench: setup
	$(BIN)/python bench/checker_bench.py

# issue 7's acceptance: seeds 1-10 × {eos, at-least-once} under --nemesis all (about 7 min a run)
soak: setup
	$(BIN)/python soak/soak.py --seeds 1-10 --sinks eos,at-least-once --time-limit 120

clean:
	rm -rf $(VENV) results/*/ results/latest .cache
