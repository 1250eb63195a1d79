"""robo's local Ray (``robo.ray_tasks.init_ray``) is on loopback only."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from robo.ray_tasks import LOOPBACK, init_ray  # noqa: E402


@pytest.fixture
def local_ray():
    if ray.is_initialized():
        pytest.skip("Ray is already running in this process")
    try:
        init_ray(None, num_cpus=1)
        yield ray
    finally:
        ray.shutdown()


def _descendants(pid: int) -> set[int]:
    """Every process below ``pid`` (Linux ``/proc``)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _listening(pids: set[int]) -> dict[str, str]:
    """Local address -> ``ss`` process field of the TCP sockets the processes ``pids`` listen on (``ss -ltnpH``)."""
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
    return {line.split()[3]: line.split()[-1] for line in out.splitlines()
            if any(f"pid={pid}," in line for pid in pids)}


def test_local_ray_binds_to_loopback(local_ray):
    assert ray.util.get_node_ip_address() == LOOPBACK
    assert [n["NodeManagerAddress"] for n in ray.nodes()] == [LOOPBACK]

    @ray.remote(num_cpus=1)
    def node_ip(_):
        return ray.util.get_node_ip_address()

    assert ray.get(node_ip.remote(0)) == LOOPBACK  # a worker sees the same node

    if shutil.which("ss") is None or not Path("/proc/self/stat").exists():
        return
    # The GCS, raylet and workers all run below this process; none listens beyond loopback.
    sockets = _listening(_descendants(os.getpid()))
    assert any("gcs_server" in owner for owner in sockets.values()), sockets
    loopback = ("127.0.0.1:", "[::ffff:127.0.0.1]:", "[::1]:")
    assert all(address.startswith(loopback) for address in sockets), sockets


def test_joining_a_cluster_passes_the_address_through(monkeypatch, caplog):
    calls = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: calls.append(kw))
    with caplog.at_level("INFO", logger="robo.ray_tasks"):
        init_ray("10.0.0.5:6379", num_cpus=4)
    assert calls == [dict(address="10.0.0.5:6379", log_to_driver=False)]
    assert "10.0.0.5:6379" in caplog.text
