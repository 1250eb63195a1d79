"""Read a LeRobot v3.0 dataset (see ``format``; robo's or one LeRobot wrote): episodes as arrays, and stats.

    ds = LeRobotDataset("data/pusht")
    ds.fps, ds.num_episodes, ds.num_frames, ds.features, ds.stats, ds.tasks
    ep = ds.episode(0)     # {"observation.state": (T, 5) float32, "action": (T, 2), "observation.image": (T, H, W, 3)}

A v2.0 / v2.1 folder is refused with the command that converts it (``robo record convert=<old> out=<new>``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import cv2
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from .format import CODEBASE_VERSION, INFO, LEGACY_VERSIONS, STATS, TASKS

NUMERIC = ("float32", "float64", "int64", "int32", "bool")


def _why(e: BaseException) -> str:
    """A library's error message on one line."""
    return " ".join(str(e).split()) or type(e).__name__


def column_to_numpy(column, dtype: str, shape: list[int]) -> np.ndarray:
    """A parquet column (scalars, or fixed-size / variable lists, nested for ndim > 1) -> (N, *shape),
    (N,) for shape [1]. ValueError if it holds nulls or not N * prod(shape) values."""
    col = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    n = len(col)
    while pa.types.is_list(col.type) or pa.types.is_fixed_size_list(col.type) or pa.types.is_large_list(col.type):
        if col.null_count:
            raise ValueError(f"the column holds {col.null_count} null lists")
        col = col.flatten()
    if col.null_count:
        raise ValueError(f"the column holds {col.null_count} null values")
    if len(col) != n * math.prod(shape):
        raise ValueError(f"the column holds {len(col)} values in {n} rows, expected {math.prod(shape)} a row")
    flat = np.asarray(col.to_numpy(zero_copy_only=False), dtype=dtype)
    return flat if list(shape) == [1] else flat.reshape(n, *shape)


def read_json(path: Path) -> dict:
    """A JSON object file; ValueError naming ``path`` if it is not one."""
    try:
        doc = json.loads(path.read_bytes())
    except (ValueError, RecursionError) as e:  # JSONDecodeError, UnicodeDecodeError, nesting past the stack
        raise ValueError(f"{path} is not valid JSON ({_why(e)})") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{path} holds a JSON {type(doc).__name__}, expected an object")
    return doc


def read_parquet(path: Path) -> pa.Table:
    """One parquet file; ValueError naming ``path`` if pyarrow cannot read it."""
    try:
        table = pq.read_table(path)
        table.validate(full=True)  # offsets, and UTF-8 in strings
        table.column_names  # noqa: B018 - and in column names (UnicodeDecodeError)
        return table
    except (pa.ArrowException, OSError, UnicodeDecodeError) as e:  # corrupt footer, pages, compression
        raise ValueError(f"{path} is not a readable parquet file ({_why(e)})") from None


def read_parquet_folder(folder: Path) -> pa.Table:
    """Every ``chunk-*/file-*.parquet`` under ``folder``, in order, as one table."""
    paths = sorted(folder.glob("chunk-*/file-*.parquet"))
    if not paths:
        raise FileNotFoundError(f"{folder} holds no chunk-*/file-*.parquet files")
    tables = [read_parquet(p) for p in paths]
    try:
        return pa.concat_tables(tables, promote_options="default")
    except pa.ArrowException as e:
        raise ValueError(f"{folder}: its parquet files' columns do not match ({_why(e)})") from None


def read_tasks(path: Path) -> dict[int, str]:
    """meta/tasks.parquet -> {task_index: task}; the tasks are the pandas index column, or a ``task`` column."""
    table = read_parquet(path)
    try:
        meta = json.loads((table.schema.metadata or {}).get(b"pandas", b"{}"))
    except (ValueError, RecursionError):
        meta = {}  # unreadable pandas metadata: look for a ``task`` column
    columns = meta.get("index_columns") if isinstance(meta, dict) else None
    index = [c for c in columns if isinstance(c, str)] if isinstance(columns, list) else []
    name = index[0] if index else "task"
    for column in ("task_index", name):
        if column not in table.column_names:
            raise ValueError(f"{path} has no {column!r} column (columns: {table.column_names})")
    indices, tasks = table.column("task_index").to_pylist(), table.column(name).to_pylist()
    if not all(isinstance(i, int) for i in indices) or not all(isinstance(t, str) for t in tasks):
        raise ValueError(f"{path}: task_index must hold integers and {name!r} strings")
    return dict(zip(indices, tasks))


def _check_info(info: dict, path: Path) -> None:
    """The fields of meta/info.json the reader uses: fps a positive number, features {name: {dtype, shape}}."""
    fps = info.get("fps")
    if isinstance(fps, bool) or not isinstance(fps, (int, float)) or not 0 < fps < math.inf:
        raise ValueError(f"{path}: fps must be a positive number, got {fps!r}")
    features = info.get("features")
    if not isinstance(features, dict):
        raise ValueError(f"{path}: features must be an object {{name: {{dtype, shape}}}}, "
                         f"got {type(features).__name__}")
    for k, ft in features.items():
        shape = ft.get("shape") if isinstance(ft, dict) else None
        if not isinstance(ft, dict) or not isinstance(ft.get("dtype"), str) or not isinstance(shape, list) or not all(
                isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in shape):
            raise ValueError(f"{path}: feature {k!r} must have a dtype string and a shape of positive integers, "
                             f"got {ft!r}"[:300])
    if any(f["dtype"] == "video" for f in features.values()) and not isinstance(info.get("video_path"), str):
        raise ValueError(f"{path}: video features need a video_path template, got {info.get('video_path')!r}")


def read_stats(path: Path) -> dict[str, dict[str, np.ndarray]]:
    """meta/stats.json -> {feature: {stat: array}}; ValueError naming ``path`` unless numbers a stat."""
    out = {}
    for k, d in read_json(path).items():
        if not isinstance(d, dict):
            raise ValueError(f"{path}: the stats of {k!r} must be an object {{stat: numbers}}, got {type(d).__name__}")
        try:
            out[k] = {s: np.asarray(v, dtype=np.float64) for s, v in d.items()}
        except (ValueError, TypeError, OverflowError) as e:
            raise ValueError(f"{path}: a stat of {k!r} is not an array of numbers ({_why(e)})") from None
    return out


def _int_column(table: pa.Table, name: str, where: Path) -> np.ndarray:
    if name not in table.column_names:
        raise ValueError(f"{where} has no {name!r} column")
    col = table.column(name)
    if not pa.types.is_integer(col.type) or col.null_count:
        raise ValueError(f"{where}: column {name!r} must hold integers, it holds {col.type} ({col.null_count} nulls)")
    return col.to_numpy().astype(np.int64)


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
        self.info = read_json(self.root / INFO)
        version = self.info.get("codebase_version")
        if version in LEGACY_VERSIONS:
            raise ValueError(f"{self.root} is a LeRobot {version} dataset; convert it to {CODEBASE_VERSION} with "
                             f"`robo record convert={self.root} out=<new folder>`")
        if not str(version).startswith("v3."):
            raise ValueError(f"{self.root} has codebase_version {version!r}; robo reads {CODEBASE_VERSION}")
        _check_info(self.info, self.root / INFO)
        self.stats = read_stats(self.root / STATS) if (self.root / STATS).is_file() else {}
        if not (self.root / TASKS).is_file():
            raise FileNotFoundError(f"{self.root} is not a LeRobot dataset: {TASKS} is missing")
        self.tasks = read_tasks(self.root / TASKS)
        episodes = read_parquet_folder(self.root / "meta/episodes")
        where = self.root / "meta/episodes"
        order = np.argsort(_int_column(episodes, "episode_index", where), kind="stable")
        self.episode_from = _int_column(episodes, "dataset_from_index", where)[order]
        self.episode_to = _int_column(episodes, "dataset_to_index", where)[order]
        episodes = episodes.select([c for c in episodes.column_names if not c.startswith("stats/")]).to_pylist()
        self.episodes = [episodes[i] for i in order]
        self.fps = float(self.info["fps"])
        self.features = self.info["features"]
        self.image_keys = [k for k, f in self.features.items() if f["dtype"] in ("image", "video")]
        self.video_keys = [k for k, f in self.features.items() if f["dtype"] == "video"]
        table = read_parquet_folder(self.root / "data")
        self.data = {}
        for k, ft in self.features.items():
            if ft["dtype"] in NUMERIC and k in table.column_names:
                try:
                    self.data[k] = column_to_numpy(table.column(k), ft["dtype"], ft["shape"])
                except (ValueError, TypeError, OverflowError, pa.ArrowException) as e:
                    raise ValueError(f"{self.root / 'data'}: column {k!r} does not hold {ft['dtype']} values of "
                                     f"shape {ft['shape']} ({_why(e)})") from None
        self._images = {}
        for k, ft in self.features.items():
            if ft["dtype"] == "image":
                col = table.column(k).combine_chunks() if k in table.column_names else None
                if col is None or not pa.types.is_struct(col.type) or col.type.get_field_index("bytes") < 0:
                    raise ValueError(f"{self.root / 'data'}: image feature {k!r} has no column of "
                                     '{"bytes", "path"} structs')
                self._images[k] = col.field("bytes")
        if "index" not in self.data:
            raise ValueError(f"{self.root / 'data'}: no integer 'index' column (a feature of {INFO})")
        n = len(self.data["index"])
        if not np.array_equal(self.data["index"], np.arange(n)) or (len(self.episodes) and self.episode_to[-1] != n) \
                or np.any(self.episode_from < 0) or np.any(self.episode_from > self.episode_to) \
                or np.any(self.episode_to > n):
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

    def _image(self, key: str, col: pa.Array, i: int) -> np.ndarray:
        """Frame ``i`` (over the dataset) of image feature ``key``: (H, W, 3) uint8 RGB."""
        raw = col[i].as_py()
        img = cv2.imdecode(np.frombuffer(raw, np.uint8), cv2.IMREAD_COLOR) if raw else None
        if img is None:
            raise ValueError(f"{self.root / 'data'}: frame {i} of image feature {key!r} is not a PNG or JPEG image")
        return img[:, :, ::-1]

    def episode(self, episode_index: int, images: bool = True) -> dict[str, np.ndarray]:
        """All columns of one episode: {name: (T, ...)}; images (T, H, W, 3) uint8 RGB if ``images``."""
        if not 0 <= episode_index < self.num_episodes:
            raise IndexError(f"episode {episode_index} out of range [0, {self.num_episodes})")
        a, b = int(self.episode_from[episode_index]), int(self.episode_to[episode_index])
        out = {k: v[a:b] for k, v in self.data.items()}
        if images:
            for k, col in self._images.items():
                out[k] = np.stack([self._image(k, col, i) for i in range(a, b)])
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
            missing = [s for s in ("min", "max", "mean", "std") if s not in self.stats[key]]
            if missing:
                raise KeyError(f"{key!r} has no {missing} stats in {self.root / STATS}")
            out[name] = {s: torch.as_tensor(self.stats[key][s], dtype=torch.float32).flatten()
                         for s in ("min", "max", "mean", "std")}
        return out
