"""LeRobot's own side of the interop tests, run with the python of a LeRobot 0.4.4 install (``make lerobot``).

    python lerobot_side.py read <dataset> <out.npz>     # LeRobotDataset loads it; every frame and the stats -> npz
    python lerobot_side.py write <dataset> <in.npz>     # LeRobotDataset.create / add_frame / save_episode / finalize

``in.npz`` holds ``spec`` (json: fps, features, episode lengths, tasks) and one (N, ...) array per feature.
Videos are decoded with LeRobot's "pyav" backend (its "torchcodec" default needs the system's FFmpeg libraries).
"""

import json
import sys

import numpy as np
from lerobot.datasets.lerobot_dataset import LeRobotDataset


def read(root: str, out: str) -> None:
    ds = LeRobotDataset("robo/interop", root=root, video_backend="pyav")
    frames = [ds[i] for i in range(len(ds))]
    arrays = {}
    for key in frames[0]:
        if key == "task":
            continue
        x = np.stack([f[key].numpy() for f in frames])
        if ds.meta.features[key]["dtype"] in ("image", "video"):  # (C, H, W) float in [0, 1] -> (H, W, 3) uint8
            x = np.round(x.transpose(0, 2, 3, 1) * 255).astype(np.uint8)
        arrays[f"frame/{key}"] = x
    arrays.update({f"stats/{k}/{s}": np.asarray(v) for k, d in ds.meta.stats.items() for s, v in d.items()})
    info = {"fps": ds.fps, "num_episodes": ds.num_episodes, "tasks": [f["task"] for f in frames],
            "video_keys": ds.meta.video_keys, "image_keys": ds.meta.image_keys,
            "episodes": [{k: ds.meta.episodes[i][k] for k in ("episode_index", "length", "dataset_from_index",
                                                                "dataset_to_index")} for i in range(ds.num_episodes)]}
    np.savez(out, info=json.dumps(info), **arrays)


def write(root: str, spec_path: str) -> None:
    z = np.load(spec_path)
    spec = json.loads(str(z["spec"]))
    features = {k: {**ft, "shape": tuple(ft["shape"])} for k, ft in spec["features"].items()}
    use_videos = any(ft["dtype"] == "video" for ft in features.values())
    ds = LeRobotDataset.create("robo/interop", fps=spec["fps"], features=features, root=root, robot_type="test",
                               use_videos=use_videos)
    start = 0
    for length, task in zip(spec["lengths"], spec["tasks"]):
        for t in range(start, start + length):
            ds.add_frame({**{k: z[k][t] for k in features}, "task": task})
        ds.save_episode()
        start += length
    ds.finalize()


if __name__ == "__main__":
    {"read": read, "write": write}[sys.argv[1]](*sys.argv[2:])
