# The product's front door: `make demo` and `make test` do all the set-up on a fresh machine.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP_RUN  := $(VENV)/.installed-run
STAMP_TEST := $(VENV)/.installed-test
STAMP_NB   := $(VENV)/.installed-notebooks
DEB_PACKAGES := mininet bridge-utils iputils-ping
PYTEST_ARGS ?=
PACKAGES := dht pubsub sim topologies traces chordpub
# the packages' bytecode, written even where PYTHONDONTWRITEBYTECODE is set: every node and client process
# the demo and the suite start would otherwise compile them from source (a third of a second each)
COMPILE = $(PY) -m compileall -q $(PACKAGES) >/dev/null
# the simulator's compiled loops, cached once before the tests and notebooks that start together would
# each compile them (sim/warm.py)
WARM_SIM = $(PY) -m sim.warm
# the Spark driver's class-data archive, built once before the tests and notebooks whose sessions would
# start together and map none (traces/class_archive.py)
WARM_SPARK = $(PY) -m traces.class_archive

.PHONY: demo test lint mutants notebooks system-deps bench-deps bench-groups bench-peers bench-consensus clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(STAMP_RUN): setup.cfg pyproject.toml | $(PY)
	$(PY) -m pip install -q -e .
	touch $@

$(STAMP_TEST): setup.cfg pyproject.toml | $(PY)
	$(PY) -m pip install -q -e '.[test,notebooks]'
	touch $@ $(STAMP_RUN) $(STAMP_NB)

$(STAMP_NB): setup.cfg pyproject.toml | $(PY)
	$(PY) -m pip install -q -e '.[notebooks]'
	touch $@ $(STAMP_RUN)

# Debian packages the Mininet tests need; installed only when running as root and missing.
system-deps:
	@missing=""; for p in $(DEB_PACKAGES); do \
	  dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = "0" ]; then \
	    echo "installing Debian packages:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	  else echo "not root: cannot install$$missing (Mininet tests will fail under CI=true)"; fi; \
	fi

demo: $(STAMP_RUN)
	@$(COMPILE)
	$(VENV)/bin/chordpub demo

test: $(STAMP_TEST) system-deps
	$(VENV)/bin/ruff check .
	@$(COMPILE)
	@$(WARM_SIM)
	@$(WARM_SPARK)
	$(PY) -m pytest $(PYTEST_ARGS)

# JupyterLab on the analysis notebooks (plots inline); open the URL it prints. As root (a container,
# a lab machine) Jupyter needs --allow-root; NOTEBOOK_ARGS passes more (e.g. --port=8899).
NOTEBOOK_ARGS ?=
notebooks: $(STAMP_NB)
	$(VENV)/bin/jupyter lab notebooks/ --no-browser $$([ "$$(id -u)" = 0 ] && echo --allow-root) $(NOTEBOOK_ARGS)

# The benchmarks' yardsticks: nats-server and mosquitto from Debian's packages (as root, when missing),
# nats-py and paho-mqtt into the venv; none of them is a dependency of chordpub itself.
BENCH_SERVERS := nats-server mosquitto
bench-deps: $(STAMP_RUN)
	@missing=""; for p in $(BENCH_SERVERS); do \
	  command -v $$p >/dev/null 2>&1 || [ -x /usr/sbin/$$p ] || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = "0" ]; then echo "installing Debian packages:$$missing"; apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	  else echo "install$$missing (Debian packages) first"; exit 2; fi; fi
	$(PY) -m pip install -q -e '.[bench]'

# Work queues against NATS JetStream (benchmarks/groups.py).
bench-groups: bench-deps
	$(PY) benchmarks/groups.py

# chordpub against NATS, Mosquitto and JetStream (benchmarks/peers.py).
bench-peers: bench-deps
	$(PY) benchmarks/peers.py

# Consensus against etcd (benchmarks/consensus.py): etcd from Debian's etcd-server package (as root,
# when missing); a yardstick, not a dependency.
bench-consensus: $(STAMP_RUN)
	@command -v etcd >/dev/null 2>&1 || { if [ "$$(id -u)" = "0" ]; then apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends etcd-server; \
	  else echo "install etcd-server (Debian package) first"; exit 2; fi; }
	$(PY) benchmarks/consensus.py

# Every mutant docs/testing.md lists, each applied to a scratch copy, its test run 5 times: all must fail.
# Not part of `make test` (it runs each acceptance test five times over); MUTANTS_ARGS="--only groups".
MUTANTS_ARGS ?=
mutants: $(STAMP_TEST) system-deps
	$(PY) -m tests.mutants --jobs 2 $(MUTANTS_ARGS)

lint: $(STAMP_TEST)
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis .ruff_cache
