"""Convert a LeRobot v2.0 / v2.1 dataset (robo's earlier recordings, or LeRobot's) to v3.0.

    robo record convert=data/pusht_v2 out=data/pusht       # the command
    convert_legacy("data/pusht_v2", "data/pusht")          # the function

v2.x kept one parquet file per episode (``data/chunk-000/episode_000000.parquet``), ``meta/episodes.jsonl``,
``meta/tasks.jsonl`` and images as PNG files (robo), as PNG bytes in the parquet, or as one mp4 per episode
(LeRobot). Every frame is carried over as it is; images stay images and videos are re-encoded as v3.0 videos.
"""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pyarrow.parquet as pq

from .format import DEFAULT_FEATURES, INFO, LEGACY_VERSIONS, STEP_FEATURES
from .reader import column_to_numpy
from .writer import DatasetWriter


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def _png(path: Path) -> np.ndarray:
    img = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if img is None:
        raise FileNotFoundError(f"image {path} is missing or unreadable")
    return img[:, :, ::-1]


def _legacy_images(old: Path, info: dict, key: str, table, episode: int, chunk: int) -> np.ndarray:
    """(T, H, W, 3) uint8 frames of a v2.x image or video feature of one episode."""
    ft = info["features"][key]
    if ft["dtype"] == "video":
        from .video import decode_video

        frames, times = decode_video(old / info["video_path"].format(episode_chunk=chunk, video_key=key,
                                                                     episode_index=episode))
        ts = table.column("timestamp").to_numpy()
        return frames[np.abs(times[None, :] - ts[:, None]).argmin(1)]
    if key in table.column_names:  # LeRobot: {"bytes", "path"} in the parquet
        return np.stack([cv2.imdecode(np.frombuffer(v["bytes"], np.uint8), cv2.IMREAD_COLOR)[:, :, ::-1]
                         for v in table.column(key).to_pylist()])
    return np.stack([_png(old / info["image_path"].format(image_key=key, episode_index=episode, frame_index=i))
                     for i in range(table.num_rows)])  # robo: PNG files


def convert_legacy(old: str | Path, out: str | Path, overwrite: bool = False) -> dict:
    """Write the v2.0 / v2.1 dataset at ``old`` as a v3.0 dataset at ``out``; returns a summary dict."""
    old = Path(old)
    if not (old / INFO).is_file():
        raise FileNotFoundError(f"{old} is not a LeRobot dataset: {INFO} is missing")
    info = json.loads((old / INFO).read_text())
    if info.get("codebase_version") not in LEGACY_VERSIONS:
        raise ValueError(f"{old} has codebase_version {info.get('codebase_version')!r}; convert= takes "
                         f"{' or '.join(LEGACY_VERSIONS)} datasets")
    tasks = {t["task_index"]: t["task"] for t in _jsonl(old / "meta/tasks.jsonl")}
    episodes = sorted(_jsonl(old / "meta/episodes.jsonl"), key=lambda e: e["episode_index"])
    if not episodes:
        raise ValueError(f"{old}: meta/episodes.jsonl lists no episodes")
    features = {k: ft for k, ft in info["features"].items() if k not in DEFAULT_FEATURES and k not in STEP_FEATURES
                and ft["dtype"] != "string"}
    size = int(info.get("chunks_size", 1000))
    with DatasetWriter(out, info["fps"], features, robot_type=info.get("robot_type") or "",
                       overwrite=overwrite) as w:
        for e in episodes:
            i = e["episode_index"]
            path = old / info["data_path"].format(episode_chunk=i // size, episode_index=i)
            if not path.is_file():
                raise FileNotFoundError(f"{old}: episode {i} data {path} is missing")
            table = pq.read_table(path)
            cols = {k: column_to_numpy(table.column(k), ft["dtype"], ft["shape"])
                    for k, ft in {**features, **STEP_FEATURES}.items()
                    if ft["dtype"] not in ("image", "video") and k in table.column_names}
            cols.update({k: _legacy_images(old, info, k, table, i, i // size) for k, ft in features.items()
                         if ft["dtype"] in ("image", "video")})
            for t in range(table.num_rows):
                w.add_frame({k: v[t] for k, v in cols.items()})
            task_index = table.column("task_index")[0].as_py() if "task_index" in table.column_names else None
            w.save_episode(tasks.get(task_index, (e.get("tasks") or [""])[0]))
    frames = sum(e["length"] for e in episodes)
    return {"dataset": str(out), "from": str(old), "from_version": info["codebase_version"],
            "episodes": len(episodes), "frames": frames}
