import os

os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402


@pytest.fixture(autouse=True)
def _seed_everything():
    torch.manual_seed(0)
    np.random.seed(0)
    yield


@pytest.fixture
def one_thread():
    """Tiny nets: one torch thread is fastest, and spinning OpenMP threads crawl on a loaded machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def heavy_crazyflie():
    """A Crazyflie loaded to 34 g: RAPTOR settles ~10 cm low on it (no integral action, high hover throttle)."""
    import dataclasses

    from sims.envs import make_robot

    return dataclasses.replace(make_robot("crazyflie"), mass=0.034)


# Tests that need the machine to themselves carry the `serial` mark: the Betaflight SITL and the drivers' stand-ins
# fly against a wall clock, and Ray's and torchrun's worker processes crawl beside a busy core (a Ray teacher test:
# 18 s alone, 350-480 s beside two busy processes). `make test` runs them alone, then the rest on every core.
SERIAL = ("tests/hardware/", "tests/sims/test_vehicles.py", "tests/sims/test_mavlink_vehicle.py",
          "tests/robo/test_robot_env.py", "tests/robo/test_ddp.py")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.nodeid.startswith(SERIAL) or "ray_local" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.serial)


if os.environ.get("PYTEST_XDIST_WORKER"):  # one torch thread per worker: the workers already fill the cores
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
