# onceproof: two commands do all set-up.
#   make run   – create .venv, install, resolve jars, run the default test on a local cluster
#   make test  – lint, then every test folder (unit, cluster, docker, browser: see tests/README.md)
#   make unit  – tests/unit only: no cluster, no Docker, no browser (about 3 minutes on 2 cores)
PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin

CHROMIUM ?= /usr/bin/chromium
SUDO   := $(if $(filter 0,$(shell id -u)),,sudo)

.PHONY: probe-kafka17754 setup run test unit lint postgres-prereqs clock-prereqs fuse-prereqs test-oldest test-extended certify-user bench bench-pipeline bench-overhead bench-spark-start bench-real-read bench-spark-checker bench-tables soak soak-summary certify clean docker-prereqs docker-images docker-compose-plugin docker-engine-stop

setup: $(VENV)/.installed

# pip byte-compiles every installed module here (27 of a fresh virtualenv's 68 s): with
# PYTHONDONTWRITEBYTECODE set (it is on this machine) Python never writes a .pyc, so without them every
# process of the suite compiled pandas, pyarrow and the rest from source again (tests/unit: 175 s → 371 s)
$(VENV)/.installed: pyproject.toml constraints.txt src/onceproof/deps/kafka/pom.xml src/onceproof/deps/spark-kafka/pom.xml
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) (Python 3.11)"; exit 1; }
	@command -v java >/dev/null || { echo "need Java 17+ on PATH"; exit 1; }
	@command -v mvn >/dev/null || { echo "need Maven (mvn) on PATH"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e '.[test]'
	$(BIN)/onceproof deps
	touch $@

run: setup
	$(BIN)/onceproof run --sink eos --nemesis kill-executor,kill-driver-in-commit-window --time-limit 60 --seed 1

# tests/browser/ renders report.html in headless Chromium (Debian's package)
$(CHROMIUM):
	@command -v apt-get >/dev/null || { echo "need Chromium at $(CHROMIUM): install your distribution's chromium"; exit 1; }
	$(SUDO) apt-get update -q
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium

# tests/docker/ is part of `make test`: Debian's docker.io, debootstrap and docker-compose are installed when
# missing, and ONCEPROOF_TEST_DOCKER=require turns a missing engine into a failure rather than a skip. The
# session starts dockerd when no engine answers (stopping it at the end) and builds the images when their
# tags are missing (tests/conftest.py).
# --sink postgres starts a PostgreSQL server per run (backends/common/postgres.py): Debian's postgresql-15
# is installed when no server binaries are found, without the package's own "main" cluster (nothing starts)
postgres-prereqs:
	@command -v postgres >/dev/null || ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || { \
	  command -v apt-get >/dev/null || { echo "need PostgreSQL's server (initdb, postgres): install your distribution's postgresql, or set ONCEPROOF_PG_BIN"; exit 1; }; \
	  $(SUDO) mkdir -p /etc/postgresql-common && echo "create_main_cluster = false" | $(SUDO) tee /etc/postgresql-common/createcluster.conf >/dev/null; \
	  $(SUDO) apt-get update -q && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql-15; }

# clock-skew (nemesis/clock.py) starts the brokers under libfaketime (LD_PRELOAD; no host clock changes):
# Debian's libfaketime is installed when no libfaketime.so.1 is found (ONCEPROOF_FAKETIME_LIB names another)
clock-prereqs:
	@test -n "$$ONCEPROOF_FAKETIME_LIB" || ls /usr/lib/*/faketime/libfaketime.so.1 /usr/local/lib/faketime/libfaketime.so.1 >/dev/null 2>&1 || { \
	  command -v apt-get >/dev/null || { echo "need libfaketime (libfaketime.so.1): install your distribution's libfaketime, or set ONCEPROOF_FAKETIME_LIB"; exit 1; }; \
	  $(SUDO) apt-get update -q && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q libfaketime; }

# lose-unsynced-writes mounts a FUSE layer under each broker's log.dirs (backends/common/lazyfs.py): Debian's
# fuse3 (libfuse3.so.3, fusermount3) is installed when either is missing; the kernel's /dev/fuse must
# exist (a container needs --device /dev/fuse and CAP_SYS_ADMIN). mfusepy comes with the Python dependencies.
fuse-prereqs:
	@{ command -v fusermount3 >/dev/null && ls /usr/lib/*/libfuse3.so.3 /lib/*/libfuse3.so.3 /usr/lib/libfuse3.so.3 2>/dev/null | grep -q .; } || { \
	  command -v apt-get >/dev/null || { echo "need libfuse 3 (libfuse3.so.3) and fusermount3: install your distribution's fuse3"; exit 1; }; \
	  $(SUDO) apt-get update -q && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q fuse3; }
	@test -e /dev/fuse || echo "warning: no /dev/fuse here: the lazyfs tests skip and lose-unsynced-writes turns are skipped"

# tests/unit runs on both cores (pytest-xdist: 166 s against 366 s serial, 2026-11-27); the cluster, Docker
# and browser tests one at a time (one cluster at a time on 2 cores)
test: setup lint $(CHROMIUM) docker-prereqs postgres-prereqs clock-prereqs fuse-prereqs
	$(BIN)/python -m pytest -q -n 2 -rfE --tb=short --durations=10 tests/unit
	ONCEPROOF_TEST_DOCKER=require $(BIN)/python -m pytest -v -rfE --tb=short --durations=40 -m "not extended" \
	  tests/browser tests/cluster tests/docker
	$(MAKE) test-oldest

# The real-cluster and Docker tests make test leaves out for its time budget (marker "extended", listed in
# tests/README.md): the --nemesis all run, the detection pairs' other sides, a two-cell test-all, shrink,
# the --schedule replay, the bundled postgres pair, the compose file, and more (about 75 min)
test-extended: setup docker-prereqs postgres-prereqs clock-prereqs fuse-prereqs
	ONCEPROOF_TEST_DOCKER=require $(BIN)/python -m pytest -v -rA --durations=0 -m extended tests/cluster tests/docker

# The oldest PySpark that pyproject.toml accepts (its "pyspark>=X" floor), everything else from the lock:
# the unit tests of the code that runs on the job's PySpark, the tests that run PySpark itself (the
# driver's warm-up micro-batch, the Spark checking engine) and the default run's faults on a local cluster
# (45 s of them, with rolling-upgrade), in a virtualenv of its own (.venv-oldest). That run's brokers start
# on the oldest Kafka line onceproof supports (--kafka-version, jars.OLDEST_KAFKA: its newest patch), and the
# run must be valid with test.json naming that release.
OLDEST_PYSPARK := $(shell sed -n 's/^ *"pyspark>=\([0-9.]*\),.*/\1/p' pyproject.toml)
OLDEST_KAFKA ?= 3.5.2
# ... and mid-run, rolling-upgrade moves those brokers to the newest release Maven Central serves (as
# tests/cluster/test_fault_families.py's NEWEST_KAFKA), one at a time, then finalizes metadata.version: the
# run must be valid and the roll exercised (docs/versions.md)
UPGRADE_KAFKA ?= 4.4.0
OLDEST := .venv-oldest
# the unit tests whose code runs on the job's PySpark (a local Spark session, the runtimes, the sink's log
# and hooks, the mutants, the upgrade faults, the completeness check); the others do not import pyspark
OLDEST_UNIT := $(addprefix tests/unit/,test_spark_engine.py test_runtimes.py test_sink_log.py \
  test_sink_capabilities.py test_mutants.py test_upgrade.py test_completeness.py)
test-oldest: setup
	@test -n "$(OLDEST_PYSPARK)" || { echo "no pyspark>= floor in pyproject.toml"; exit 1; }
	test -x $(OLDEST)/bin/python || $(PYTHON) -m venv $(OLDEST)
	sed 's/^pyspark==.*/pyspark==$(OLDEST_PYSPARK)/' constraints.txt > $(OLDEST)/constraints.txt
	$(OLDEST)/bin/pip install -q --disable-pip-version-check -c $(OLDEST)/constraints.txt -e '.[test]'
	$(OLDEST)/bin/python -c "import pyspark; assert pyspark.__version__ == '$(OLDEST_PYSPARK)', pyspark.__version__"
	$(OLDEST)/bin/python -m pytest -q -n 2 -rA $(OLDEST_UNIT) tests/cluster/test_warm_up.py tests/cluster/test_spark_engine.py
	rm -rf $(OLDEST)/results
	$(OLDEST)/bin/onceproof run --sink eos --nemesis kill-executor,kill-driver-in-commit-window,rolling-upgrade \
	  --time-limit 45 --seed 1 --kafka-version $(OLDEST_KAFKA) --kafka-upgrade-to $(UPGRADE_KAFKA) \
	  --results $(OLDEST)/results
	$(OLDEST)/bin/python tests/ran_on.py $(OLDEST)/results kafka=$(OLDEST_KAFKA) pyspark=$(OLDEST_PYSPARK) \
	  kafka-upgrade-to=$(UPGRADE_KAFKA)

unit: setup
	$(BIN)/python -m pytest -q -n 2 tests/unit

lint: setup
	$(BIN)/ruff check .

bench: setup
	$(BIN)/python bench/checker_bench.py

# issue 11: eos vs Spark's own sink at saturation, latency at 300 records/s, the raw Kafka limit (see docs/performance.md)
bench-pipeline: setup
	$(BIN)/python bench/pipeline_bench.py --json bench/pipeline.json

# issue 11: the whole check against a real read of the same topics on a real cluster (see docs/performance.md)
bench-real-read: setup
	$(BIN)/python bench/real_read_ratio.py --records 2000000 --json bench/real_read_ratio.json

# issue 11: onceproof check --engine spark on 50M synthetic records (local[2]; see docs/performance.md)
# 1M-row output tables, a real PostgreSQL server's (REPEATABLE READ) and a Delta table's (its _delta_log,
# 100 commits), each read by its output reader and checked (~1.5 min)
bench-tables: setup postgres-prereqs
	$(BIN)/python bench/table_read_bench.py --table postgres
	$(BIN)/python bench/table_read_bench.py --table delta
	$(BIN)/python bench/table_read_bench.py --table iceberg

bench-spark-checker: setup
	$(BIN)/python bench/spark_checker_bench.py --records 50000000 --engines spark --history none --timeout 3600

# issue 11: the default run's wall time − time limit, median of 3 (see docs/performance.md)
bench-overhead: setup
	$(BIN)/python bench/overhead.py --json bench/overhead.json

# what a Spark master and workers kept up across drivers would save a driver start (issue 42, item 2; 2 min)
bench-spark-start: setup
	$(BIN)/python bench/spark_start.py --samples 3

# issue 7's acceptance: seeds 1-10 × {eos, at-least-once} under --nemesis all (eos about 8 min a run,
# at-least-once about 6: about 2 h 15 min)
soak: setup
	$(BIN)/python soak/soak.py --seeds 1-10 --sinks eos,at-least-once --time-limit 120

# the soaks kept in soak/records/ (copy a soak's results/soak-<time>.json there to keep it) as one
# false-alarm rate (a seed soaked twice counts once, the newest); seconds
soak-summary: setup
	$(BIN)/python soak/summary.py soak/records/*.json --out results/soak-summary.md

# issue 10's certification: the detection table (every mutant against the fault package aimed at it,
# eos as the control, eos caught under the traps package, 3 seeds) and the eos certificate (4 packages × 2 seeds); see docs/performance.md for the time
# a user's driver-side transactional job (examples/driver_txn_pipeline.py) under kill-driver,kill-executor,
# kill-broker on seeds 1-3, and test-all --pipeline-cmd on it and on its naive variant (about 12 min)
# KAFKA-17754 probe (issue 29 item 5): a held Produce or EndTxn request against a producer reused across
# transactions and one per transaction (experiments/kafka17754.py, docs/kafka17754.md; an experiment that
# prints what it saw: about 4 min; ONCEPROOF_KAFKA_VERSION=3.5.2 runs it on another broker from Maven Central)
probe-kafka17754: setup
	$(BIN)/python experiments/kafka17754.py

certify-user: setup
	ONCEPROOF_USER_SEEDS=1,2,3 $(BIN)/python -m pytest -v tests/cluster/test_user_certificate.py

# KAFKA_VERSION=3.9.1 certifies on another Kafka release (--kafka-version, docs/versions.md);
# KAFKA_VERSIONS=3.9.1,4.4.0 runs every cell on each (test-all --kafka-versions: a matrix per release)
# SPARK_VERSIONS=3.5,4.1 runs the eos suite's cells on each PySpark too (test-all --spark-versions: a matrix
# per version pair); the mutants suite keeps onceproof's PySpark (its Delta mutants run on their own, 4.2.0)
KAFKA_VERSION ?=
KAFKA_VERSIONS ?=
SPARK_VERSIONS ?=
CERTIFY_KAFKA := $(if $(KAFKA_VERSION),--kafka-version $(KAFKA_VERSION)) \
  $(if $(KAFKA_VERSIONS),--kafka-versions $(KAFKA_VERSIONS))
# The eos certificate's cells that are the detection table's controls (the same run: eos under process,
# upgrade and disk, seeds 1-2) are taken from it (--reuse, harness/reuse.py), not run twice
certify: setup postgres-prereqs clock-prereqs fuse-prereqs
	$(BIN)/onceproof test-all --mutants --weak-configs --test-count 3 --stop-when-caught $(CERTIFY_KAFKA)
	$(BIN)/onceproof test-all --sink eos --nemesis-package upgrade,process,network,commit,operator,lossy,clock,disk \
	  --test-count 2 --time-limit 60 --reuse results/mutants/latest $(CERTIFY_KAFKA) \
	  $(if $(SPARK_VERSIONS),--spark-versions $(SPARK_VERSIONS))

# The Docker backend's images, built here (no registry needed; see backends/docker/images.py): installs
# Debian's docker.io and debootstrap when missing, starts dockerd (nice 19, idle I/O; data under
# ~/.cache/onceproof/docker) when no engine answers and leaves it running, then builds
# onceproof/{base,jre,kafka,spark,toxiproxy,postgres}; an image whose content-hash tag exists is not rebuilt.
# KAFKA_BASE=apache/kafka:4.1.1 and SPARK_BASE=apache/spark:<tag> build on the official images instead.
KAFKA_BASE ?=
SPARK_BASE ?=
docker-images: setup docker-prereqs
	$(BIN)/python -m onceproof.backends.docker.images build $(if $(KAFKA_BASE),--kafka-base $(KAFKA_BASE)) $(if $(SPARK_BASE),--spark-base $(SPARK_BASE))

# Debian's docker.io (dockerd) when no engine answers and there is no dockerd, debootstrap (the base image)
# and, when neither `docker compose` nor `docker-compose` runs, Debian's docker-compose (v1.29; reads
# docker-compose.yml as v2 does). Nothing is installed when all are present.
docker-prereqs: setup
	@if ! { command -v dockerd || test -x /usr/sbin/dockerd; } >/dev/null && \
	    ! $(BIN)/python -c "from onceproof.backends.docker.engine import ping; raise SystemExit(ping() is None)"; then \
	  command -v apt-get >/dev/null || { echo "no Docker engine answers and there is no dockerd: install Docker"; exit 1; }; \
	  $(SUDO) apt-get update -q && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker.io; fi
	@{ command -v debootstrap || test -x /usr/sbin/debootstrap; } >/dev/null || { \
	  command -v apt-get >/dev/null || { echo "need debootstrap (Debian's, to build the base image)"; exit 1; }; \
	  $(SUDO) apt-get update -q && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap; }
	@$(BIN)/python -c "from onceproof.backends.docker.compose import compose_command as c; raise SystemExit(c() is None)" || { \
	  command -v apt-get >/dev/null || { echo "need Docker Compose: make docker-compose-plugin"; exit 1; }; \
	  $(SUDO) apt-get update -q && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker-compose; }

# `docker compose` (v2) for docker-compose.yml: Debian 12 has only Compose v1, so the plugin is built from
# its Go module (needs Go 1.24+; several minutes the first time) and linked into ~/.docker/cli-plugins.
docker-compose-plugin: setup
	$(BIN)/python -m onceproof.backends.docker.compose

# Stop the dockerd that onceproof started (never one it did not start).
docker-engine-stop: setup
	$(BIN)/python -m onceproof.backends.docker.engine stop

clean:
	rm -rf $(VENV) results/*/ results/latest .cache
