# robo: the two set-up commands of the README are `make run` and `make test`.
VENV   ?= .venv
PY     := $(VENV)/bin/python
export MUJOCO_GL ?= egl
MAIN_RUN := runs/main/$(shell date +%Y-%m-%d_%H-%M-%S)
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: setup run test test-all bench clean

setup: $(VENV)/.installed

# Headless MuJoCo rendering needs Mesa's EGL (Debian: libegl1 libegl-mesa0).
# torch==2.13.0 is installed first: it is the local CPU wheel (pyproject's torch>=2.4 would otherwise pull CUDA).
$(VENV)/.installed: pyproject.toml
	@ldconfig -p | grep -q libEGL_mesa || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq libegl1 libegl-mesa0; }
	python3 -m venv $(VENV)
	$(PY) -m pip install -q torch==2.13.0
	echo torch==2.13.0 > $(VENV)/constraints.txt
	$(PY) -m pip install -q -c $(VENV)/constraints.txt -e '.[all,test]'
	touch $@

run: setup          ## main job: train a Crazyflie hover policy from scratch, then evaluate it -> runs/main/
	$(VENV)/bin/robo train +experiment=hover_quick hydra.run.dir=$(MAIN_RUN)/train
	$(VENV)/bin/robo eval policy=checkpoint policy.path=$(MAIN_RUN)/train/checkpoints/best/policy hydra.run.dir=$(MAIN_RUN)/eval

test: setup         ## default suite (CI); `make test-all` adds the slow tests
	$(PY) -m pytest -q

test-all: setup
	$(PY) -m pytest -q -m "slow or not slow"

bench: setup        ## simulator throughput table
	$(PY) benchmarks/sim_throughput.py

clean:
	rm -rf $(VENV) runs multirun .pytest_cache
