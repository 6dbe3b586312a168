# Quasar — see README.md. Every target creates .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test lint typecheck sizes proto bench clean

# the compiled hot paths (setup.py builds every src/quasar/<layer>/_<name>_c.c next to its _<name>_py.py twin)
EXT_SOURCES := setup.py $(wildcard src/quasar/*/_*_c.c src/quasar/_cinclude/*.h)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed-run: pyproject.toml setup.py | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[demo]'
	touch $@ $(VENV)/.built-ext

$(VENV)/.installed-dev: pyproject.toml setup.py | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@ $(VENV)/.installed-run $(VENV)/.built-ext

# rebuild the extensions in place when a C source changed after the install
$(VENV)/.built-ext: $(EXT_SOURCES) | $(VENV)/.installed-run
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $@

## make run: install and start the standalone broker on embedded defaults
## (data in ./data, pulsar://127.0.0.1:6650, admin http://127.0.0.1:8080, RocketMQ gRPC 127.0.0.1:8081)
run: $(VENV)/.installed-run $(VENV)/.built-ext
	$(BIN)/quasar standalone --data-dir ./data

## make test: install with the dev extras (and a headless JRE for Spark when java 17+ is missing, Debian's
## fuse3 for the power-loss test, Debian's etcd-server for the etcd metadata backend and the cluster tests, and
## Debian's chromium + chromium-driver for the dashboard's browser tests),
## then ruff, the import-linter contracts, mypy (configured in pyproject.toml), the file-size check, and pytest
## twice: with the compiled hot paths, then with their pure-Python twins (QUASAR_PURE_PYTHON=1)
test: $(VENV)/.installed-dev $(VENV)/.built-ext
	bash scripts/ensure_java.sh
	bash scripts/ensure_fuse.sh
	bash scripts/ensure_etcd.sh
	bash scripts/ensure_chromium.sh
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/mypy
	$(BIN)/python scripts/check_sizes.py
	$(BIN)/python -m pytest --durations=25
	QUASAR_PURE_PYTHON=1 $(BIN)/python -m pytest --durations=25

## make typecheck: mypy on every package of src/quasar, --strict for protocol, storage, ledger and metadata
typecheck: $(VENV)/.installed-dev
	$(BIN)/mypy

## make sizes: fail when a source file under src/quasar is longer than 600 lines (generated protobuf excluded)
sizes: $(BIN)/python
	$(BIN)/python scripts/check_sizes.py

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

## make proto: regenerate src/quasar/protocol/proto/PulsarApi_pb2.py and its .pyi stub (mypy-protobuf) from PulsarApi.proto
proto: $(VENV)/.installed-dev
	sh scripts/gen_proto.sh

## make bench: produce_consume.py, rocketmq.py (the RocketMQ client on Quasar, on a do-nothing gRPC server and
## beside the Pulsar client), the Spark connector beside Parquet (spark.py, needs Java 17+), then Quasar
## beside Redis and RabbitMQ in one sitting (peers_compare.py); scripts/setup_bench_peers.sh installs the peers
## (Debian packages, a bench venv) and needs root
bench: $(VENV)/.installed-run $(VENV)/.built-ext
	$(BIN)/python -m pip install --quiet -e '.[demo,spark,bench]'
	$(BIN)/python benchmarks/produce_consume.py
	$(BIN)/python benchmarks/rocketmq.py
	$(BIN)/python benchmarks/spark.py
	bash scripts/setup_bench_peers.sh
	$(BIN)/python benchmarks/peers_compare.py

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .ruff_cache
	find src -name '*.so' -delete
