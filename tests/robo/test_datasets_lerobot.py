"""LeRobot interop, both ways, against LeRobot 0.4.4 itself (its own venv, made by ``make lerobot``):
LeRobot's ``LeRobotDataset`` loads what robo writes (state, PNG images, mp4 video, stats), and robo reads and
trains on what LeRobot's writer (``LeRobotDataset.create`` / ``add_frame`` / ``save_episode``) wrote."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from robo.datasets import DatasetWriter, LeRobotDataset
from robo.datasets.record import record_pusht
from robo.imitation.sources import episodes_from_dataset

LEROBOT_PY = os.environ.get("ROBO_LEROBOT_PYTHON", str(Path.home() / ".cache/robo/lerobot-0.4.4/bin/python"))
SIDE = Path(__file__).with_name("lerobot_side.py")
pytestmark = pytest.mark.skipif(not Path(LEROBOT_PY).is_file() and not os.environ.get("CI"),
                                reason="LeRobot 0.4.4 is not installed here (make lerobot)")
FEATURES = {
    "observation.state": {"dtype": "float32", "shape": [5], "names": ["a", "b", "c", "d", "e"]},
    "action": {"dtype": "float32", "shape": [2], "names": ["x", "y"]},
    "observation.image": {"dtype": "image", "shape": [12, 10, 3], "names": ["height", "width", "channels"]},
    "observation.images.top": {"dtype": "video", "shape": [32, 48, 3], "names": ["height", "width", "channels"]},
}


def lerobot(*args):
    r = subprocess.run([LEROBOT_PY, str(SIDE), *map(str, args)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"LeRobot 0.4.4 ({LEROBOT_PY}) failed:\n{r.stderr[-3000:]}"


def smooth_frames(rng, n, h=32, w=48):
    """(n, h, w, 3) uint8 moving colour gradients: video a lossy codec keeps within a few levels."""
    y, x = np.mgrid[:h, :w]
    phase = rng.random(3) * 6
    return np.stack([np.stack([127 + 100 * np.sin(x / 9 + y / 13 + t / 3 + p) for p in phase], -1)
                     for t in range(n)]).astype(np.uint8)


def lerobot_read(root, tmp_path):
    lerobot("read", root, tmp_path / "read.npz")
    z = np.load(tmp_path / "read.npz")
    return json.loads(str(z["info"])), z


def test_lerobot_reads_what_robo_writes(tmp_path):
    rng = np.random.default_rng(0)
    lengths, tasks = (5, 9, 1), ("push", "lift", "push")
    n = sum(lengths)
    data = {"observation.state": rng.standard_normal((n, 5)).astype(np.float32),
            "action": rng.standard_normal((n, 2)).astype(np.float32),
            "observation.image": rng.integers(0, 256, (n, 12, 10, 3), dtype=np.uint8),
            "observation.images.top": smooth_frames(rng, n), "next.reward": rng.random(n).astype(np.float32)}
    with DatasetWriter(tmp_path / "ds", fps=10, features=FEATURES, robot_type="test") as w:
        start = 0
        for length, task in zip(lengths, tasks):
            for t in range(start, start + length):
                w.add_frame({k: v[t] for k, v in data.items()})
            w.save_episode(task)
            start += length
    info, z = lerobot_read(tmp_path / "ds", tmp_path)
    assert info["num_episodes"] == 3 and info["fps"] == 10 and info["video_keys"] == ["observation.images.top"]
    assert info["tasks"] == [t for length, t in zip(lengths, tasks) for _ in range(length)]
    assert [(e["dataset_from_index"], e["dataset_to_index"]) for e in info["episodes"]] == [(0, 5), (5, 14), (14, 15)]
    for key in ("observation.state", "action", "observation.image", "next.reward"):
        assert z[f"frame/{key}"].tobytes() == data[key].tobytes(), key  # bit for bit, images too (PNG)
    assert z["frame/next.done"].tolist() == [t == length - 1 for length in lengths for t in range(length)]
    video = z["frame/observation.images.top"].astype(int)
    assert np.abs(video - data["observation.images.top"]).mean() < 6  # AV1 crf 30, yuv420p chroma: lossy
    ours = np.concatenate([LeRobotDataset(tmp_path / "ds").episode(i)["observation.images.top"] for i in range(3)])
    assert np.abs(video - ours).max() <= 2  # robo decodes the same frames at the same timestamps
    stats = json.loads((tmp_path / "ds/meta/stats.json").read_text())
    for key, d in stats.items():
        for s, v in d.items():
            np.testing.assert_allclose(z[f"stats/{key}/{s}"], v, rtol=1e-12, err_msg=f"{key}/{s}")
    np.testing.assert_allclose(stats["action"]["mean"], data["action"].astype(np.float64).mean(0), rtol=1e-12)


def test_lerobot_reads_robo_record_video(tmp_path):
    record_pusht(tmp_path / "pusht", episodes=1, obs="image", video=True, seed=3, progress=False)
    info, z = lerobot_read(tmp_path / "pusht", tmp_path)
    ours = LeRobotDataset(tmp_path / "pusht").episode(0)
    assert info["video_keys"] == ["observation.image"] and z["frame/observation.image"].shape[1:] == (96, 96, 3)
    assert z["frame/observation.state"].tobytes() == ours["observation.state"].tobytes()
    assert np.abs(z["frame/observation.image"].astype(int) - ours["observation.image"]).max() <= 2


def test_robo_reads_and_trains_on_what_lerobot_writes(tmp_path):
    from sims.pusht.demos import generate_demos

    demos = generate_demos(2, seed=5, obs_type="image")
    features = {"observation.state": {"dtype": "float32", "shape": [2], "names": ["agent_x", "agent_y"]},
                "action": {"dtype": "float32", "shape": [2], "names": ["target_x", "target_y"]},
                "observation.image": {"dtype": "video", "shape": [96, 96, 3], "names": ["height", "width", "channels"]}}
    arrays = {"observation.state": np.concatenate([d["obs"] for d in demos]).astype(np.float32),
              "action": np.concatenate([d["action"] for d in demos]).astype(np.float32),
              "observation.image": np.concatenate([d["image"].transpose(0, 2, 3, 1) for d in demos])}
    spec = {"fps": 10, "features": features, "lengths": [len(d["action"]) for d in demos], "tasks": ["push-T"] * 2}
    np.savez(tmp_path / "spec.npz", spec=json.dumps(spec), **arrays)
    lerobot("write", tmp_path / "lr", tmp_path / "spec.npz")
    ds = LeRobotDataset(tmp_path / "lr")
    assert ds.num_episodes == 2 and ds.tasks == {0: "push-T"} and ds.video_keys == ["observation.image"]
    eps = episodes_from_dataset(tmp_path / "lr", {"obs": "observation.state", "action": "action",
                                                  "image": "observation.image"})
    for ep, d in zip(eps, demos):
        assert ep["obs"].tobytes() == d["obs"].astype(np.float32).tobytes()
        assert ep["action"].tobytes() == d["action"].astype(np.float32).tobytes()
        assert ep["image"].shape == d["image"].shape and np.abs(ep["image"].astype(int) - d["image"]).mean() < 3
    np.testing.assert_allclose(ds.stats["action"]["mean"], arrays["action"].astype(np.float64).mean(0), rtol=1e-6)
    # a robo trainer on LeRobot's dataset: the image diffusion policy, a few steps
    run = subprocess.run(
        [sys.executable, "-m", "robo", "train", "policy=diffusion", "task=pusht_image", f"dataset={tmp_path / 'lr'}",
         "policy.down_dims=[16,32]", "policy.encoder_channels=[8,16,16]", "policy.horizon=8", "policy.n_action_steps=4",
         "policy.diffusion_step_embed_dim=16", "policy.train.steps=2", "policy.train.warmup_steps=1",
         "policy.train.checkpoint_every=2", "policy.train.eval_every=0", "task.eval.episodes=1", "task.eval.num_envs=1",
         "task.eval.max_steps=4", f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=tmp_path, env={**os.environ, "MUJOCO_GL": "egl"}, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["step"] == 2
