# ncclbot-sweep: two entry points that work on a fresh Debian machine with Python 3.11.
#   make demo   install into .venv, build the plugin, run the main job on the simulated fabric
#   make test   install, build the plugin, start what the tests need, run the whole suite
#   make demo-gb200  after the demo: tune on its H100 sweep, sweep sim GB200 (MNNVL off/on), replay frozen champions
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
DEMO_OUT ?= demo-out
PYTEST_ARGS ?=
DEMO_TRIALS ?= 151
NCCLBOT := $(VENV)/bin/ncclbot-sweep

.PHONY: venv demo demo-gb200 test plugin clean

# setuptools prints an "Editable installation ... same name as your package" notice for every
# editable install whose packages are not all under one source root (ours maps analysis/,
# templates/, plugin/ ... into ncclbot_sweep); no pyproject.toml setting declares it away, so
# that one message is filtered. A wheel build (pip install .) prints no warning at all.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	PYTHONWARNINGS="ignore:Editable installation" $(PY) -m pip install --quiet -e '.[test]'
	touch $@

venv: $(VENV)/.installed

plugin:
	$(MAKE) -C plugin

demo: venv plugin
	$(VENV)/bin/ncclbot-sweep demo --out $(DEMO_OUT)

# The paper's Table 3 on the simulator: every family tuned on the demo's H100 sweep (train
# 4/8 nodes), the same forced-arm sweep on sim GB200 with MNNVL off and on, the champions
# replayed frozen on both. Each step resumes where it stopped.
demo-gb200: demo
	$(NCCLBOT) analyze tune --dataset $(DEMO_OUT)/dataset --out $(DEMO_OUT)/tune --trials $(DEMO_TRIALS) --workers 2
	for v in off on; do \
	  $(NCCLBOT) submit campaigns/demo.yaml -i sim-gb200-mnnvl-$$v -w $(DEMO_OUT)/gb200-$$v --ignore-budget && \
	  $(NCCLBOT) ingest $(DEMO_OUT)/gb200-$$v -d $(DEMO_OUT)/gb200-$$v-dataset || exit 1; \
	done
	$(NCCLBOT) analyze replication --dataset $(DEMO_OUT)/gb200-off-dataset --dataset $(DEMO_OUT)/gb200-on-dataset \
	  --policies "AUTO,Random,@$(DEMO_OUT)/tune/champions.yaml,GBM+cost" --out $(DEMO_OUT)/gb200
	$(NCCLBOT) analyze report --dataset $(DEMO_OUT)/dataset --live-dataset $(DEMO_OUT)/live-dataset --out $(DEMO_OUT)/report \
	  --policies "AUTO,Random,@$(DEMO_OUT)/tune/champions.yaml,GBM+cost" --study $(DEMO_OUT)/tune --study $(DEMO_OUT)/gb200

test: venv plugin
	bash tests/infra/install-test-packages.sh
	$(PY) -m pytest $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) $(DEMO_OUT) build *.egg-info
