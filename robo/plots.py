"""Training plots."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def plot_learning_curve(history: list[dict], path: str | Path, title: str = "") -> Path:
    """Evaluation history (dicts with ``step`` and metrics) -> PNG: median error, success, return."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    steps = np.array([h["step"] for h in history], dtype=float)
    get = lambda k: np.array([h.get(k, np.nan) for h in history], dtype=float)  # noqa: E731
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    err = get("final_median_position_error")
    axes[0].semilogy(steps, np.where(np.isfinite(err), err, np.nan), "o-")
    axes[0].set_ylabel("median final position error [m]")
    axes[1].plot(steps, get("success_rate"), "o-")
    axes[1].set_ylabel("success rate")
    axes[1].set_ylim(-0.05, 1.05)
    axes[2].plot(steps, get("train_return"), "o-")
    axes[2].set_ylabel("mean training return")
    for ax in axes:
        ax.set_xlabel("env steps")
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    tmp = path.with_name(f".{path.stem}.tmp{path.suffix}")
    fig.savefig(tmp, dpi=90)
    plt.close(fig)
    tmp.replace(path)
    return path
