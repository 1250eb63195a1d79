"""Read a LeRobot v3.0 dataset (see ``format``; robo's or one LeRobot wrote): episodes as arrays, and stats.

    ds = LeRobotDataset("data/pusht")
    ds.fps, ds.num_episodes, ds.num_frames, ds.features, ds.stats, ds.tasks
    ep = ds.episode(0)     # {"observation.state": (T, 5) float32, "action": (T, 2), "observation.image": (T, H, W, 3)}

A v2.0 / v2.1 folder is refused with the command that converts it (``robo record convert=<old> out=<new>``).
"""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from .format import CODEBASE_VERSION, INFO, LEGACY_VERSIONS, STATS, TASKS


def column_to_numpy(column, dtype: str, shape: list[int]) -> np.ndarray:
    """A parquet column (scalars, or fixed-size / variable lists, nested for ndim > 1) -> (N, *shape),
    (N,) for shape [1]."""
    col = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    n = len(col)
    while pa.types.is_list(col.type) or pa.types.is_fixed_size_list(col.type) or pa.types.is_large_list(col.type):
        col = col.flatten()
    flat = np.asarray(col.to_numpy(zero_copy_only=False), dtype=dtype)
    return flat if list(shape) == [1] else flat.reshape(n, *shape)


def read_parquet_folder(folder: Path) -> pa.Table:
    """Every ``chunk-*/file-*.parquet`` under ``folder``, in order, as one table."""
    paths = sorted(folder.glob("chunk-*/file-*.parquet"))
    if not paths:
        raise FileNotFoundError(f"{folder} holds no chunk-*/file-*.parquet files")
    return pa.concat_tables([pq.read_table(p) for p in paths], promote_options="default")


def read_tasks(path: Path) -> dict[int, str]:
    """meta/tasks.parquet -> {task_index: task}; the tasks are the pandas index column, or a ``task`` column."""
    table = pq.read_table(path)
    meta = json.loads((table.schema.metadata or {}).get(b"pandas", b"{}"))
    index = [c for c in meta.get("index_columns", []) if isinstance(c, str)]
    name = index[0] if index else "task"
    if name not in table.column_names:
        raise ValueError(f"{path} has no task column (columns: {table.column_names})")
    return dict(zip(table.column("task_index").to_pylist(), table.column(name).to_pylist()))


class LeRobotDataset:
    """A v3.0 dataset on disk, its numeric columns in memory (images and videos are decoded on demand).

    Attributes: ``info`` (meta/info.json), ``fps``, ``features``, ``stats`` ({feature: {stat: array}}),
    ``tasks`` ({task_index: task}), ``episodes`` (one dict a row of meta/episodes, without its stats),
    ``episode_from`` / ``episode_to`` ((E,) frame ranges), ``data`` ({column: (N, ...)}), ``image_keys``
    (features stored as images or videos), ``video_keys``.
    """

    def __init__(self, root: str | Path):
        self.root = Path(root)
        if not self.root.is_dir():
            raise FileNotFoundError(f"dataset folder {self.root} does not exist")
        if not (self.root / INFO).is_file():
            raise FileNotFoundError(f"{self.root} is not a LeRobot dataset: {INFO} is missing")
        self.info = json.loads((self.root / INFO).read_text())
        version = self.info.get("codebase_version")
        if version in LEGACY_VERSIONS:
            raise ValueError(f"{self.root} is a LeRobot {version} dataset; convert it to {CODEBASE_VERSION} with "
                             f"`robo record convert={self.root} out=<new folder>`")
        if not str(version).startswith("v3."):
            raise ValueError(f"{self.root} has codebase_version {version!r}; robo reads {CODEBASE_VERSION}")
        self.stats = {}
        if (self.root / STATS).is_file():
            self.stats = {k: {s: np.asarray(v, dtype=np.float64) for s, v in d.items()}
                          for k, d in json.loads((self.root / STATS).read_text()).items()}
        self.tasks = read_tasks(self.root / TASKS)
        episodes = read_parquet_folder(self.root / "meta/episodes")
        episodes = episodes.select([c for c in episodes.column_names if not c.startswith("stats/")])
        self.episodes = sorted(episodes.to_pylist(), key=lambda e: e["episode_index"])
        self.fps = float(self.info["fps"])
        self.features = self.info["features"]
        self.image_keys = [k for k, f in self.features.items() if f["dtype"] in ("image", "video")]
        self.video_keys = [k for k, f in self.features.items() if f["dtype"] == "video"]
        table = read_parquet_folder(self.root / "data")
        self.data = {k: column_to_numpy(table.column(k), ft["dtype"], ft["shape"]) for k, ft in self.features.items()
                     if ft["dtype"] in ("float32", "float64", "int64", "int32", "bool") and k in table.column_names}
        self._images = {k: table.column(k).combine_chunks().field("bytes") for k, ft in self.features.items()
                        if ft["dtype"] == "image"}
        self.episode_from = np.array([e["dataset_from_index"] for e in self.episodes], dtype=np.int64)
        self.episode_to = np.array([e["dataset_to_index"] for e in self.episodes], dtype=np.int64)
        if not np.array_equal(self.data["index"], np.arange(len(self.data["index"]))) or (
                len(self.episodes) and self.episode_to[-1] != len(self.data["index"])):
            raise ValueError(f"{self.root}: the frame rows do not match the episodes' frame ranges in meta/episodes")
        self._video_cache: tuple[Path, np.ndarray, np.ndarray] | None = None

    @property
    def num_episodes(self) -> int:
        return len(self.episodes)

    @property
    def num_frames(self) -> int:
        return int(self.episode_to[-1]) if len(self.episodes) else 0

    @property
    def episode_lengths(self) -> np.ndarray:
        return self.episode_to - self.episode_from

    def _video_frames(self, key: str, episode_index: int, timestamps: np.ndarray) -> np.ndarray:
        """(T, H, W, 3) uint8 frames of ``key`` at an episode's timestamps (the nearest decoded frame)."""
        from .video import decode_video

        e = self.episodes[episode_index]
        path = self.root / self.info["video_path"].format(video_key=key, chunk_index=e[f"videos/{key}/chunk_index"],
                                                          file_index=e[f"videos/{key}/file_index"])
        if self._video_cache is None or self._video_cache[0] != path:
            self._video_cache = (path, *decode_video(path))
        _, frames, times = self._video_cache
        query = e[f"videos/{key}/from_timestamp"] + timestamps.astype(np.float64)
        nearest = np.abs(times[None, :] - query[:, None]).argmin(1)
        worst = np.abs(times[nearest] - query).max()
        if worst > 0.25 / self.fps:
            raise ValueError(f"{path}: no frame within {0.25 / self.fps:.4f} s of episode {episode_index}'s "
                             f"timestamps (off by {worst:.4f} s); the video does not match meta/episodes")
        return frames[nearest]

    def episode(self, episode_index: int, images: bool = True) -> dict[str, np.ndarray]:
        """All columns of one episode: {name: (T, ...)}; images (T, H, W, 3) uint8 RGB if ``images``."""
        if not 0 <= episode_index < self.num_episodes:
            raise IndexError(f"episode {episode_index} out of range [0, {self.num_episodes})")
        a, b = int(self.episode_from[episode_index]), int(self.episode_to[episode_index])
        out = {k: v[a:b] for k, v in self.data.items()}
        if images:
            for k, col in self._images.items():
                out[k] = np.stack([cv2.imdecode(np.frombuffer(col[i].as_py(), np.uint8), cv2.IMREAD_COLOR)[:, :, ::-1]
                                   for i in range(a, b)])
            for k in self.video_keys:
                out[k] = self._video_frames(k, episode_index, out["timestamp"])
        return out

    def normalization_stats(self, obs_key: str = "observation.state", action_key: str = "action"
                            ) -> dict[str, dict[str, torch.Tensor]]:
        """meta/stats.json in ``ChunkedPolicy.set_normalization`` form: {"obs"|"action": {min, max, mean, std}}."""
        out = {}
        for name, key in (("obs", obs_key), ("action", action_key)):
            if key not in self.stats:
                raise KeyError(f"{key!r} has no stats in {self.root / STATS}; features: {sorted(self.stats)}")
            out[name] = {s: torch.as_tensor(self.stats[key][s], dtype=torch.float32).flatten()
                         for s in ("min", "max", "mean", "std")}
        return out
