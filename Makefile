# ncclbot-sweep: two entry points that work on a fresh Debian machine with Python 3.11.
#   make demo   install into .venv, build the plugin, run the main job on the simulated fabric
#   make test   install, build the plugin, start what the tests need, run the whole suite
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
DEMO_OUT ?= demo-out
PYTEST_ARGS ?=

.PHONY: venv demo test plugin clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

venv: $(VENV)/.installed

plugin:
	$(MAKE) -C plugin

demo: venv plugin
	$(VENV)/bin/ncclbot-sweep demo --out $(DEMO_OUT)

test: venv plugin
	bash tests/infra/install-slurm-sshd.sh
	$(PY) -m pytest $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) $(DEMO_OUT) build *.egg-info
