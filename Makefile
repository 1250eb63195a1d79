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

.PHONY: setup lerobot run test test-all bench wheels clean

setup: $(VENV)/.installed

# Headless MuJoCo rendering needs Mesa's EGL (Debian: libegl1 libegl-mesa0); the flight-controller MCU builds need
# Debian's Arm toolchain and emulator (gcc-arm-none-eabi, libnewlib-arm-none-eabi, qemu-system-arm).
# torch==2.13.0 is installed first: it is the local CPU wheel (pyproject's torch>=2.4 would otherwise pull CUDA).
$(VENV)/.installed: pyproject.toml
	@ldconfig -p | grep -q libEGL_mesa || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq libegl1 libegl-mesa0; }
	@command -v arm-none-eabi-gcc >/dev/null && command -v qemu-system-arm >/dev/null && [ -d /usr/lib/arm-none-eabi/newlib ] || \
		{ $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm; }
	python3 -m venv $(VENV)
	$(PY) -m pip install -q torch==2.13.0
	echo torch==2.13.0 > $(VENV)/constraints.txt
	$(PY) -m pip install -q -c $(VENV)/constraints.txt -e '.[all,test,metaworld]'
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

# The tests that need the machine to themselves (the `serial` mark: firmware SITL, drivers' stand-ins, Ray, torchrun)
# run alone, then the rest on every core (pytest-xdist).
test: setup lerobot ## default suite (CI); `make test-all` adds the slow tests
	$(PY) -m pytest -q -m "serial and not slow"; serial=$$?; \
	$(PY) -m pytest -q -m "not serial and not slow" -n auto --dist loadfile --durations=20; rest=$$?; \
	[ $$serial -eq 0 ] && [ $$rest -eq 0 ]

test-all: setup lerobot
	$(PY) -m pytest -q -m "slow or not slow"

bench: setup        ## simulator throughput table
	$(PY) benchmarks/sim_throughput.py

# Wheels of robo's dependencies but torch (exact versions as installed here) for a Linux x86_64 machine with its
# own Python and CUDA torch and no package index (docs/guide/gpu.md). WHEELS=bench: what benchmarks/gpu.py
# imports; WHEELS=all: robo's core dependencies. Sdist-only ones (antlr4-python3-runtime) come as sdists.
# They are split into dist/wheels/part-1, part-2, ... of at most WHEEL_PART_MIB each.
WHEELS        ?= bench
WHEELS_PYTHON ?= 3.12
# dist/wheels/part-<n>: each fits one device run's carry (64 MiB with the source)
WHEEL_PART_MIB ?= 60
WHEEL_PLATFORMS := $(foreach p,manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 \
                     manylinux2014_x86_64 manylinux1_x86_64 linux_x86_64,--platform $(p))
wheels:             ## dist/wheels: the dependencies but torch, for a GPU machine without an index
	mkdir -p dist/wheels
	$(PY) benchmarks/gpu.py --requirements $(WHEELS) > dist/wheels/requirements.txt
	$(PY) -m pip download -q --no-deps --prefer-binary --python-version $(WHEELS_PYTHON) $(WHEEL_PLATFORMS) \
	  -d dist/wheels -r dist/wheels/requirements.txt
	$(PY) benchmarks/gpu.py --split-wheels dist/wheels --part-mib $(WHEEL_PART_MIB)

clean:
	rm -rf $(VENV) runs multirun .pytest_cache
