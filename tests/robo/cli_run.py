"""Run the ``robo`` command line in a subprocess, as a user would: one helper for the CLI tests.

    from tests.robo.cli_run import robo

    r = robo("train", "policy=diffusion", f"hydra.run.dir={run}", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
"""

import os
import subprocess
import sys
from pathlib import Path


def robo(*args: str, cwd: str | Path, timeout: float = 300,
         env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m robo *args`` in ``cwd``; returns the finished process (returncode, stdout, stderr as text).

    The child gets this process's environment with ``MUJOCO_GL=egl`` (headless rendering), then ``env`` on top
    (e.g. ``{"OMP_NUM_THREADS": "1"}``). It does not raise on a non-zero exit: callers assert on ``returncode``
    and show ``stderr``. ``timeout`` (s) raises ``subprocess.TimeoutExpired`` when the command runs longer.
    """
    return subprocess.run([sys.executable, "-m", "robo", *args], cwd=cwd,
                          env={**os.environ, "MUJOCO_GL": "egl", **(env or {})}, capture_output=True, text=True,
                          timeout=timeout)
