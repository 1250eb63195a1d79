"""Plots and videos of rollouts, written into a run folder."""

from __future__ import annotations

from pathlib import Path

from robo.evaluate import Rollout
from sims.envs.task import BatchedQuadrotorTask


def write_flight_media(run_dir: Path, task: BatchedQuadrotorTask, r: Rollout, title: str, plot_envs: int = 16,
                       video: dict | None = None) -> dict[str, Path]:
    """``plots/trajectories.png`` of up to ``plot_envs`` envs and, if ``video["enabled"]``,
    ``videos/flight.mp4`` of env ``video["env_index"]`` rendered from MuJoCo; ``title`` (say which policy flies)
    heads the plot and captions the video."""
    from sims.quadrotor.render import plot_trajectories_png, render_flight_mp4

    out = {}
    n = min(int(plot_envs), r.states.shape[1])
    out["plot"] = plot_trajectories_png(r.times, r.states[:, :n, :3], run_dir / "plots" / "trajectories.png",
                                        targets=r.reference[:, 0], title=title)
    if video and video.get("enabled", False):
        i = int(video.get("env_index", 0))
        fps = float(video.get("fps", 50))
        stride = max(1, int(round(1.0 / (task.dt * fps))))
        out["video"] = render_flight_mp4(task.sim.params.to_params(i), r.states[::stride, i],
                                         run_dir / "videos" / "flight.mp4", fps=fps,
                                         width=int(video.get("width", 480)), height=int(video.get("height", 360)),
                                         target=r.reference[::stride, i], caption=title)
    return out
