# robo: the two set-up commands of the README are `make run` and `make test`.
VENV   ?= .venv
PY     := $(VENV)/bin/python
export MUJOCO_GL ?= egl
MAIN_RUN := runs/main/$(shell date +%Y-%m-%d_%H-%M-%S)
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

# LeRobot 0.4.4 in a venv of its own (its torch<2.11 pin cannot sit beside robo's torch): the tests prove that
# LeRobot reads what robo writes and robo reads what LeRobot writes (tests/robo/test_datasets_lerobot.py).
LEROBOT_VENV ?= $(HOME)/.cache/robo/lerobot-0.4.4
export ROBO_LEROBOT_PYTHON := $(LEROBOT_VENV)/bin/python

.PHONY: setup lerobot run test test-all bench clean

setup: $(VENV)/.installed

# Headless MuJoCo rendering needs Mesa's EGL (Debian: libegl1 libegl-mesa0).
# torch==2.13.0 is installed first: it is the local CPU wheel (pyproject's torch>=2.4 would otherwise pull CUDA).
$(VENV)/.installed: pyproject.toml
	@ldconfig -p | grep -q libEGL_mesa || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq libegl1 libegl-mesa0; }
	python3 -m venv $(VENV)
	$(PY) -m pip install -q torch==2.13.0
	echo torch==2.13.0 > $(VENV)/constraints.txt
	$(PY) -m pip install -q -c $(VENV)/constraints.txt -e '.[all,test]'
	$(PY) -m pip install -q --no-deps gym-pusht==0.1.8
	touch $@

lerobot: $(LEROBOT_VENV)/.installed

$(LEROBOT_VENV)/.installed:
	python3 -m venv $(LEROBOT_VENV)
	$(LEROBOT_VENV)/bin/python -m pip install -q lerobot==0.4.4
	touch $@

run: setup          ## main job: train a Crazyflie hover policy from scratch, then evaluate it -> runs/main/
	$(VENV)/bin/robo train +experiment=hover_quick hydra.run.dir=$(MAIN_RUN)/train
	$(VENV)/bin/robo eval policy=checkpoint policy.path=$(MAIN_RUN)/train/checkpoints/best/policy hydra.run.dir=$(MAIN_RUN)/eval

test: setup lerobot ## default suite (CI); `make test-all` adds the slow tests
	$(PY) -m pytest -q

test-all: setup lerobot
	$(PY) -m pytest -q -m "slow or not slow"

bench: setup        ## simulator throughput table
	$(PY) benchmarks/sim_throughput.py

clean:
	rm -rf $(VENV) runs multirun .pytest_cache
