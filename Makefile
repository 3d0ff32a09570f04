PYTHON ?= python3
PIP := $(PYTHON) -m pip

.PHONY: install install-demo demo test test-slow lint typecheck pytest bench fuzz install-extras test-extras monitor-power
.PHONY: install-browser test-browser install-postgres test-postgres install-sdk test-sdk install-locust test-locust docs

# Training jobs run in a bubblewrap sandbox (Debian's bubblewrap); a job's network reaches the internet through
# slirp4netns where servekit runs as root: both installed here when apt can (CI runs as root).
install:
	(command -v bwrap >/dev/null && command -v slirp4netns >/dev/null) || (apt-get update -q && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q bubblewrap slirp4netns) \
		|| echo "servekit: training jobs need bubblewrap (apt-get install bubblewrap slirp4netns); its tests fail without it"
	$(PIP) install -q -e '.[test]'

install-demo:
	$(PIP) install -q -e '.[demo,fast]'

# make demo PORT=9501 SAGEMAKER_PORT=9080 when 8501 or 8080 is taken
PORT ?= 8501
SAGEMAKER_PORT ?= 8080
demo: install-demo
	servekit demo --dir demo-models --port $(PORT) --sagemaker-port $(SAGEMAKER_PORT)

lint:
	$(PYTHON) -m ruff check src tests
	$(PYTHON) -m ruff format --check src tests

typecheck:
	$(PYTHON) -m mypy

# The TensorFlow/torch tests (marked extras) run in `make test-extras`, the browser tests (marked browser) in
# `make test-browser`, the PostgreSQL tests (marked postgres) in `make test-postgres`, not here: the default suite
# needs none of them.
pytest:
	$(PYTHON) -m pytest -q -p no:cacheprovider -m "not extras and not browser and not postgres and not sdk and not locust and not slow"

# The end-to-end cases of 10 s or more (marked slow: autoscaling, rollouts, monitoring schedules, recommend, the
# example pipeline), kept out of `make test` so that it stays within 15 minutes; CI runs them.
test-slow: install
	$(PYTHON) -m pytest -q -p no:cacheprovider -m "slow and not extras and not browser and not postgres and not sdk and not locust"

test: install lint typecheck pytest

# The runtimes of the optional frameworks (TensorFlow SavedModel, TorchScript / torch.export): installs the
# extras, plus tensorflow-serving-api without its dependencies (it would pull the full `tensorflow` package
# beside tensorflow-cpu; its modules need only TensorFlow's protos) to write real warmup records in the tests.
# torch first, pinned: 2.13.0 is the CPU build these machines keep on disk; with it installed the extra's range is
# met, where a bare `torch` would fetch a CUDA build of several GB.
install-extras: install
	$(PIP) install -q 'torch==2.13.0'
	$(PIP) install -q -e '.[test,tensorflow,torch]'
	$(PIP) install -q --no-deps 'tensorflow-serving-api==2.21.0'

test-extras: install-extras
	$(PYTHON) -m pytest -q -p no:cacheprovider -m extras

# The web console in a real browser (tests/e2e/test_console_browser.py): Debian's Chromium from apt, Playwright for
# Python without its own browser download. SERVEKIT_REQUIRE_BROWSER turns the tests' skip (no Chromium) into a failure.
# Screenshots of each page go to $(SERVEKIT_CONSOLE_SCREENSHOTS) (default build/console-screenshots).
SERVEKIT_CONSOLE_SCREENSHOTS ?= build/console-screenshots
install-browser: install
	command -v chromium >/dev/null || (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium)
	PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 $(PIP) install -q -e '.[test,browser]'

test-browser: install-browser
	SERVEKIT_REQUIRE_BROWSER=1 SERVEKIT_CONSOLE_SCREENSHOTS=$(SERVEKIT_CONSOLE_SCREENSHOTS) \
		$(PYTHON) -m pytest -q -p no:cacheprovider -m browser

# PostgreSQL as the state database (docs/gateway-replicas.md): the tests start a server from Debian's packages
# (postgresql-15: initdb, pg_ctl; as the postgres user when run as root). SERVEKIT_REQUIRE_POSTGRES turns the tests'
# skip (no server binaries, no psycopg) into a failure.
install-postgres: install
	command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || \
		(apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql)
	$(PIP) install -q -e '.[test,postgres]'

test-postgres: install-postgres
	SERVEKIT_REQUIRE_POSTGRES=1 $(PYTHON) -m pytest -q -p no:cacheprovider -m postgres

# The SageMaker Python SDK against servekit up (tests/e2e/sdk): the SDK in a virtualenv of its own, as in a user's
# notebook (it brings pandas and more that servekit's tests need not share), pinned to the 2.x line most code uses.
SDK_VENV ?= build/sdk-venv
# The PyTorch estimator's script runs in servekit's Python: torch's CPU build, as in install-extras.
install-sdk:
	$(PIP) install -q 'torch==2.13.0'
	test -x $(SDK_VENV)/bin/python || $(PYTHON) -m venv $(SDK_VENV)
	$(SDK_VENV)/bin/python -m pip install -q 'sagemaker==2.257.7' 'boto3>=1.34,<1.43.118'

test-sdk: install install-sdk
	SERVEKIT_SDK_PYTHON=$(abspath $(SDK_VENV))/bin/python $(PYTHON) -m pytest -q -p no:cacheprovider -m sdk

# Locust against servekit up and servekit serve (tests/e2e/locust, marked locust): the servekit[locust] extra. The
# tests run Locust in processes of its own (it patches the standard library with gevent's on import).
install-locust: install
	$(PIP) install -q -e '.[test,locust]'

test-locust: install-locust
	$(PYTHON) -m pytest -q -p no:cacheprovider -m locust

# The documentation site (mkdocs, Material theme) from docs/, into build/site: --strict, so a broken link, a
# missing page or an unknown anchor fails. mkdocs in a virtualenv of its own (its pins stay out of servekit's).
DOCS_VENV ?= build/docs-venv
docs:
	test -x $(DOCS_VENV)/bin/mkdocs || ($(PYTHON) -m venv $(DOCS_VENV) && \
		$(DOCS_VENV)/bin/python -m pip install -q 'mkdocs-material>=9.5,<10')
	NO_MKDOCS_2_WARNING=1 $(DOCS_VENV)/bin/mkdocs build --strict

# Performance suite (minutes; never part of `make test`). Peers: make bench BENCH_ARGS="--peers mlserver,torchserve"
bench:
	$(PIP) install -q -e '.[test,bench]'
	$(PYTHON) benchmarks/run.py $(BENCH_ARGS)

# The long fuzz profile (1,000 random cases per decoder test; minutes). CI runs the bounded, derandomized profile.
fuzz: install
	SERVEKIT_FUZZ_PROFILE=deep $(PYTHON) -m pytest -q -p no:cacheprovider --timeout=0 tests/integration/test_fuzz.py

# The long drift-power run: 1,000 no-drift windows of 100,000 rows (the default suite judges 100). ~3 minutes.
monitor-power:
	SERVEKIT_MONITOR_POWER=long $(PYTHON) -m pytest -q -s -p no:cacheprovider --timeout=0 tests/unit/services/monitoring/drift/test_drift_power.py

# gRPC protos (scripts/grpc_protos.py): regenerate src/servekit/serving/protos from
# protos/descriptors.txtpb; protos-extract re-reads the descriptors from the upstream wheels first.
PROTO_WHEELS := tensorflow-serving-api==2.21.0 tensorflow-cpu==2.21.0 tritonclient==2.73.0
.PHONY: protos protos-extract
protos:
	$(PYTHON) scripts/grpc_protos.py generate

protos-extract:
	rm -rf build/proto-wheels && $(PIP) download -q --no-deps -d build/proto-wheels $(PROTO_WHEELS)
	$(PYTHON) scripts/grpc_protos.py extract build/proto-wheels/*.whl
	$(PYTHON) scripts/grpc_protos.py generate
