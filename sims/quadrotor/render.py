"""Offscreen rendering of quadrotor flights (MP4 via MuJoCo) and trajectory plots (PNG).

Headless: MuJoCo renders through EGL. ``MUJOCO_GL=egl`` is set here unless the caller chose a
backend; MuJoCo reads it when first imported, so if ``mujoco`` was imported earlier without it
(it then picks GLFW, which needs a display), ``render_flight_mp4`` creates an EGL context itself
on a Linux machine without a display.
"""

from __future__ import annotations

import os

os.environ.setdefault("MUJOCO_GL", "egl")

import contextlib  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

import cv2  # noqa: E402
import mujoco  # noqa: E402
import numpy as np  # noqa: E402

from .mujoco_model import build_mjcf  # noqa: E402
from .params import QuadrotorParams  # noqa: E402


def _temp_beside(path: Path) -> Path:
    """A fresh temporary file next to ``path`` with the same suffix (writers pick formats by it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=path.suffix, dir=path.parent)
    os.close(fd)
    return Path(tmp)


@contextlib.contextmanager
def _headless_gl_fallback():
    """Within the block, ``mujoco.Renderer`` uses EGL if MuJoCo chose GLFW but there is no display."""
    gl = getattr(sys.modules[mujoco.Renderer.__module__], "gl_context", None)
    cls = getattr(gl, "GLContext", None)
    headless = sys.platform.startswith("linux") and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
    if not (headless and cls is not None and "glfw" in getattr(cls, "__module__", "")):
        yield
        return
    from mujoco.egl import GLContext as EGLContext

    gl.GLContext = EGLContext
    try:
        yield
    finally:
        gl.GLContext = cls


def _check_states(states: np.ndarray) -> np.ndarray:
    s = np.asarray(states, dtype=np.float64)
    if s.ndim != 2 or s.shape[1] != 17 or s.shape[0] < 1:
        raise ValueError(f"states has shape {s.shape}, expected (T, 17) with T >= 1 (robo quadrotor state layout)")
    if not np.all(np.isfinite(s[:, :7])):
        raise ValueError("states contain NaN or inf in position or quaternion; cannot render them")
    return s


class StateRenderer:
    """Renders single robo states (17,) of one multirotor to RGB frames from the ``chase`` camera.

    ``render(state, target=None) -> (height, width, 3) uint8``. Use as a context manager or ``close()``.
    """

    def __init__(self, params: QuadrotorParams, width: int = 480, height: int = 360, target_marker: bool = True,
                 obstacles: list[dict] | None = None):
        self.model = mujoco.MjModel.from_xml_string(
            build_mjcf(params, obstacles=obstacles, floor=True, target_marker=target_marker))
        self.data = mujoco.MjData(self.model)
        self.target_marker = target_marker
        with _headless_gl_fallback():
            self.renderer = mujoco.Renderer(self.model, height=height, width=width)

    def render(self, state: np.ndarray, target: np.ndarray | None = None) -> np.ndarray:
        x = _check_states(np.asarray(state)[None])[0]
        self.data.qpos[:3] = x[:3]
        self.data.qpos[3:7] = x[3:7] / np.linalg.norm(x[3:7])
        if self.target_marker and target is not None:
            self.data.mocap_pos[0] = target
        mujoco.mj_forward(self.model, self.data)
        self.renderer.update_scene(self.data, camera="chase")
        return self.renderer.render()

    def close(self) -> None:
        self.renderer.close()

    def __enter__(self) -> "StateRenderer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def render_flight_mp4(params: QuadrotorParams, states: np.ndarray, path: str | os.PathLike, fps: float | None = None,
                      width: int = 480, height: int = 360, target: np.ndarray | None = None,
                      obstacles: list[dict] | None = None, caption: str = "") -> Path:
    """Render a flight, seen from the ``chase`` camera, to an MP4 file (codec mp4v).

    Args:
        params: the multirotor (its MuJoCo model is built with ``build_mjcf``).
        states: (T, 17) robo states; only position and quaternion are used.
        path: output file (written atomically: temp file, then ``os.replace``).
        fps: frames per second; default ``1 / params.dt`` (real time, one frame per state).
        width, height: frame size in pixels (at most 1920 x 1080).
        target: (3,) or (T, 3) world positions of a goal marker (green sphere), m.
        obstacles: static obstacles, as in ``build_mjcf``.
        caption: a line of text drawn at the top left of every frame (e.g. which policy flies).

    Returns:
        The path written.
    """
    s = _check_states(states)
    path = Path(path)
    fps = float(fps) if fps is not None else 1.0 / params.dt
    tgt = None
    if target is not None:
        tgt = np.broadcast_to(np.asarray(target, dtype=np.float64), (len(s), 3)) \
            if np.ndim(target) == 1 else np.asarray(target, dtype=np.float64)
        if tgt.shape != (len(s), 3):
            raise ValueError(f"target has shape {np.shape(target)}, expected (3,) or ({len(s)}, 3)")
    tmp = _temp_beside(path)
    writer = cv2.VideoWriter(str(tmp), cv2.VideoWriter_fourcc(*"mp4v"), fps, (width, height))
    try:
        if not writer.isOpened():
            raise RuntimeError(f"OpenCV could not open an mp4v video writer for {tmp}")
        with StateRenderer(params, width, height, tgt is not None, obstacles) as renderer:
            for k, x in enumerate(s):
                frame = cv2.cvtColor(renderer.render(x, None if tgt is None else tgt[k]), cv2.COLOR_RGB2BGR)
                if caption:  # dark on the light sky
                    cv2.putText(frame, caption, (8, 18), cv2.FONT_HERSHEY_SIMPLEX, 0.45, (20, 20, 20), 1, cv2.LINE_AA)
                writer.write(frame)
        writer.release()
        os.replace(tmp, path)
    finally:
        writer.release()
        tmp.unlink(missing_ok=True)
    return path


def plot_trajectories_png(times: np.ndarray, positions: np.ndarray, path: str | os.PathLike,
                          targets: np.ndarray | None = None, title: str = "",
                          labels: list[str] | None = None, max_traces: int = 16) -> Path:
    """Plot x, y, z against time and a top-down x-y view of up to ``max_traces`` trajectories.

    Args:
        times: (T,) seconds.
        positions: (T, N, 3) or (T, 3) world FLU positions, m.
        path: output PNG (written atomically).
        targets: (T, 3) or (3,) world target positions, drawn dashed; optional.
        title: figure title.
        labels: N legend labels (default ``env i``; no legend beyond 8 traces).

    Returns:
        The path written.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = np.asarray(times, dtype=np.float64)
    pos = np.asarray(positions, dtype=np.float64)
    if pos.ndim == 2:
        pos = pos[:, None, :]
    if t.ndim != 1 or pos.ndim != 3 or pos.shape[0] != len(t) or pos.shape[2] != 3:
        raise ValueError(f"times {t.shape} and positions {np.shape(positions)} do not match: "
                         "expected (T,) and (T, N, 3) or (T, 3)")
    tgt = None
    if targets is not None:
        tgt = np.asarray(targets, dtype=np.float64)
        tgt = np.broadcast_to(tgt, (len(t), 3)) if tgt.shape == (3,) else tgt
        if tgt.shape != (len(t), 3):
            raise ValueError(f"targets has shape {np.shape(targets)}, expected (3,) or ({len(t)}, 3)")
    n = min(pos.shape[1], max_traces)
    labels = labels or [f"env {i}" for i in range(n)]
    path = Path(path)

    fig = plt.figure(figsize=(11, 6), dpi=100)
    grid = fig.add_gridspec(3, 2, width_ratios=(1.6, 1.0))
    axes = [fig.add_subplot(grid[i, 0]) for i in range(3)]
    top = fig.add_subplot(grid[:, 1])
    colors = plt.cm.tab10(np.arange(n) % 10)
    for i, (ax, name) in enumerate(zip(axes, "xyz")):
        for j in range(n):
            ax.plot(t, pos[:, j, i], color=colors[j], lw=1.2, label=labels[j] if i == 0 else None)
        if tgt is not None:
            ax.plot(t, tgt[:, i], "k--", lw=1.0, label="target" if i == 0 else None)
        ax.set_ylabel(f"{name} [m]")
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("time [s]")
    if n <= 8 or tgt is not None:
        axes[0].legend(loc="upper right", fontsize=7, ncol=min(n + 1, 5))
    for j in range(n):
        top.plot(pos[:, j, 0], pos[:, j, 1], color=colors[j], lw=1.2)
        top.plot(pos[0, j, 0], pos[0, j, 1], "o", color=colors[j], ms=4)
    if tgt is not None:
        top.plot(tgt[:, 0], tgt[:, 1], "k--", lw=1.0)
        top.plot(tgt[-1, 0], tgt[-1, 1], "kx", ms=8)
    top.set_xlabel("x [m]")
    top.set_ylabel("y [m]")
    top.set_title("top view (o: start)", fontsize=9)
    top.set_aspect("equal", adjustable="datalim")
    top.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    tmp = _temp_beside(path)
    try:
        fig.savefig(tmp, format="png")
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        tmp.unlink(missing_ok=True)
    return path
