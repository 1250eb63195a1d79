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
