"""Offscreen MP4 rendering and trajectory plots produce real, non-blank images."""

import cv2
import numpy as np
import pytest

from sims.quadrotor import preset
from sims.quadrotor.render import plot_trajectories_png, render_flight_mp4

W, H, T = 192, 144, 20


def _short_flight(p, T=T):
    """(T, 17) states: climbing, sliding sideways and rolling."""
    k = np.arange(T)[:, None]
    s = np.zeros((T, 17))
    s[:, :3] = [0.0, 0.0, 1.0] + k * [0.02, 0.06, 0.01]
    roll = 0.03 * k[:, 0]
    s[:, 3], s[:, 4] = np.cos(roll / 2), np.sin(roll / 2)
    return s


def test_render_flight_mp4(tmp_path):
    p = preset("x500")
    states = _short_flight(p)
    target = states[-1, :3] + [1.0, 0.4, 0.2]
    out = render_flight_mp4(p, states, tmp_path / "flight.mp4", fps=20, width=W, height=H, target=target)
    assert out == tmp_path / "flight.mp4" and out.is_file()
    assert [f.name for f in tmp_path.iterdir()] == ["flight.mp4"], "temporary file left behind"
    cap = cv2.VideoCapture(str(out))
    frames = []
    while True:
        ok, frame = cap.read()
        if not ok:
            break
        frames.append(frame)
    cap.release()
    assert len(frames) == T
    assert frames[0].shape == (H, W, 3)
    first, last = (f.astype(np.float64) for f in (frames[0], frames[-1]))
    assert first.std() > 20, "frame is nearly uniform: nothing rendered"
    # the quad's dark hub sits at the image centre (chase camera); the sky and floor are light
    centre = first[H // 2 - 8:H // 2 + 8, W // 2 - 8:W // 2 + 8].mean(-1)
    assert centre.min() < 80
    assert np.abs(first - last).mean() > 3, "the quad moved and rolled, frames should differ"
    b, g, r = (last[..., i] for i in range(3))
    assert np.sum((g > 140) & (r < 110) & (b < 110)) > 5, "green target marker not visible"


def test_render_bad_states(tmp_path):
    p = preset("x500")
    with pytest.raises(ValueError, match=r"expected \(T, 17\)"):
        render_flight_mp4(p, np.zeros((5, 13)), tmp_path / "x.mp4")
    with pytest.raises(ValueError, match=r"target has shape"):
        render_flight_mp4(p, _short_flight(p, 3), tmp_path / "x.mp4", target=np.zeros((2, 3)))
    assert not list(tmp_path.iterdir())


def test_plot_trajectories_png(tmp_path):
    rng = np.random.default_rng(0)
    t = np.linspace(0.0, 2.0, 50)
    pos = np.cumsum(rng.normal(scale=0.05, size=(50, 3, 3)), axis=0) + [0.0, 0.0, 1.0]
    out = plot_trajectories_png(t, pos, tmp_path / "sub" / "traj.png", targets=(0.0, 0.0, 1.0), title="test")
    img = cv2.imread(str(out))
    assert img is not None and img.shape == (600, 1100, 3)
    assert img.std() > 10 and (img < 128).mean() > 0.005, "plot looks blank"
    assert [f.name for f in out.parent.iterdir()] == ["traj.png"]
    # a single (T, 3) trace with a moving target also works
    plot_trajectories_png(t, pos[:, 0], tmp_path / "one.png", targets=pos[:, 1])
    with pytest.raises(ValueError, match="do not match"):
        plot_trajectories_png(t[:-1], pos, tmp_path / "bad.png")
