"""Independent jobs as Ray tasks: ``robo foundation``'s teachers and Hydra multirun sweeps (``robo.sweep``).

``address``: None or ``"local"`` start Ray on this machine with ``num_cpus``; ``"auto"`` or ``host:port`` join
the cluster of ``ray start --head``. ``fan_out`` runs ``fn(spec)`` for every spec as one task each and reports
each outcome through callbacks as it arrives; the executor is Ray's unless one is given (tests give a serial one).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

log = logging.getLogger(__name__)


class Executor(Protocol):
    """What ``fan_out`` needs of Ray: submit a call, wait for any one to finish, and read its outcome."""

    def submit(self, fn: Callable[[Any], Any], spec: Any) -> Any: ...

    def wait(self, handles: list) -> Any: ...

    def get(self, handle: Any) -> Any: ...  # the result, or raises ``TaskFailed``


class TaskFailed(RuntimeError):
    """A task raised, or its worker died."""


LOOPBACK = "127.0.0.1"


def init_ray(address: str | None = None, num_cpus: int | None = None) -> None:
    """Start (``address`` None or ``"local"``) or join (``"auto"``, ``host:port``) Ray once per process.

    A local Ray is on loopback only: its node IP is 127.0.0.1 and its GCS, raylet and workers listen on 127.0.0.1,
    with no dashboard. (Ray on Linux turns ``_node_ip_address="127.0.0.1"`` into the machine's routable IP and then
    listens on every interface, unless ``ray._private.ray_constants.ENABLE_RAY_CLUSTER`` is false, so that flag is
    cleared while ``ray.init`` runs.) Ray 2.60 also turns on its token authentication for a local ``ray.init``
    (a token in ``~/.ray/auth_token``) unless ``RAY_AUTH_MODE`` says otherwise. Joining a cluster passes its
    address through unchanged (docs/guide/foundation.md, "Cluster exposure")."""
    import ray

    if ray.is_initialized():
        return
    if address and address != "local":
        log.info("joining the Ray cluster at %s", address)
        ray.init(address=address, log_to_driver=False)
        return
    from ray._private import ray_constants

    cluster = getattr(ray_constants, "ENABLE_RAY_CLUSTER", None)
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        ray.init(num_cpus=None if num_cpus is None else int(num_cpus), include_dashboard=False, log_to_driver=False,
                 _node_ip_address=LOOPBACK)
    finally:
        if cluster is None:
            del ray_constants.ENABLE_RAY_CLUSTER
        else:
            ray_constants.ENABLE_RAY_CLUSTER = cluster


class RayExecutor:
    """``Executor`` on Ray: one ``ray.remote`` task per call with ``cpus`` (and ``gpus``) each; a worker that
    dies is retried by Ray up to ``max_retries`` times."""

    def __init__(self, address: str | None = None, num_cpus: int | None = None, cpus: float = 1.0,
                 gpus: float = 0.0, max_retries: int = 0):
        init_ray(address, num_cpus)
        self.options = dict(num_cpus=cpus, num_gpus=gpus, max_retries=max_retries, retry_exceptions=False)
        self._remote: dict[Callable, Any] = {}

    def submit(self, fn: Callable[[Any], Any], spec: Any) -> Any:
        import ray

        if fn not in self._remote:
            self._remote[fn] = ray.remote(**self.options)(fn)
        return self._remote[fn].remote(spec)

    def wait(self, handles: list) -> Any:
        import ray

        ready, _ = ray.wait(list(handles), num_returns=1)
        return ready[0]

    def get(self, handle: Any) -> Any:
        import ray

        try:
            return ray.get(handle)
        except ray.exceptions.RayError as e:
            raise TaskFailed(str(e)) from e


class SerialExecutor:
    """``Executor`` that runs each call here, in order, when it is waited for (tests; no Ray)."""

    def __init__(self):
        self.calls: list[Any] = []

    def submit(self, fn: Callable[[Any], Any], spec: Any) -> Any:
        handle = len(self.calls)
        self.calls.append((fn, spec))
        return handle

    def wait(self, handles: list) -> Any:
        return min(handles)

    def get(self, handle: Any) -> Any:
        fn, spec = self.calls[handle]
        try:
            return fn(spec)
        except Exception as e:
            raise TaskFailed(f"{type(e).__name__}: {e}") from e


def fan_out(fn: Callable[[Any], Any], specs: list, executor: Executor,
            on_submit: Callable[[Any], None] | None = None,
            on_done: Callable[[Any, Any], None] | None = None,
            on_error: Callable[[Any, str], bool] | None = None) -> None:
    """Run ``fn(spec)`` for every spec as a task of ``executor``, all at once, and handle each as it finishes:
    ``on_done(spec, result)``, or ``on_error(spec, message)``, which returns True to submit the spec again
    (default: no retry). ``on_submit(spec)`` is called before every submission."""
    running: dict[Any, Any] = {}

    def submit(spec: Any) -> None:
        if on_submit is not None:
            on_submit(spec)
        running[executor.submit(fn, spec)] = spec

    for spec in specs:
        submit(spec)
    while running:
        handle = executor.wait(list(running))
        spec = running.pop(handle)
        try:
            result = executor.get(handle)
        except TaskFailed as e:
            if on_error is not None and on_error(spec, str(e)):
                submit(spec)
            continue
        if on_done is not None:
            on_done(spec, result)
