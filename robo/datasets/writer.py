"""Write a LeRobot v3.0 dataset (see ``format``) atomically, an episode at a time.

    with DatasetWriter(root, fps=10, features={
            "observation.state": {"dtype": "float32", "shape": [5], "names": ["agent_x", ...]},
            "action": {"dtype": "float32", "shape": [2], "names": ["x", "y"]},
            "observation.image": {"dtype": "video", "shape": [96, 96, 3], "names": ["height", "width", "channels"]},
        }) as w:                                      # dtype "image": PNG bytes in the parquet (lossless)
        for t in range(T):
            w.add_frame({"observation.state": s, "action": a, "observation.image": img, "next.reward": r})
        w.save_episode(task="push the T onto the goal")
    # leaving the block finalizes: meta files written, the folder renamed into place

Everything is written into a hidden temporary folder beside ``root`` that is renamed to ``root``
only by ``finalize()``; an exception removes it, so ``root`` never holds a half-written dataset.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import cv2
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .format import (CHUNKS_SIZE, CODEBASE_VERSION, DATA_FILE_MB, DATA_PATH, DEFAULT_FEATURES, EPISODES_PATH, INFO,
                     STATS, STEP_FEATURES, TASKS, VIDEO_FILE_MB, VIDEO_PATH, aggregate_stats, chunk_file,
                     episode_stats, validate_features)

IMAGE_TYPE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])  # Hugging Face datasets' Image


def _column(values: np.ndarray, dtype: str, shape: list[int]) -> pa.Array:
    """A parquet column: scalars for shape [1], fixed-size lists for vectors."""
    flat = pa.array(values.reshape(-1).astype(dtype))
    return flat if shape == [1] else pa.FixedSizeListArray.from_arrays(flat, int(np.prod(shape)))


def _png_column(images: np.ndarray, episode: int) -> pa.Array:
    """(T, H, W, 3) uint8 RGB -> {"bytes": PNG, "path"} structs, as LeRobot embeds images."""
    rows = []
    for i, img in enumerate(images):
        ok, png = cv2.imencode(".png", np.ascontiguousarray(img[:, :, ::-1]))
        if not ok:
            raise OSError(f"could not encode frame {i} of episode {episode} as PNG")
        rows.append({"bytes": png.tobytes(), "path": f"frame-{i:06d}.png"})
    return pa.array(rows, type=IMAGE_TYPE)


def tasks_table(tasks: list[str]) -> pa.Table:
    """meta/tasks.parquet: task_index by task, the task strings being the pandas index (as LeRobot writes it)."""
    pandas_meta = {"index_columns": ["__index_level_0__"], "column_indexes": [], "pandas_version": "2.2.3",
                   "columns": [{"name": "task_index", "field_name": "task_index", "pandas_type": "int64",
                                "numpy_type": "int64", "metadata": None},
                               {"name": None, "field_name": "__index_level_0__", "pandas_type": "unicode",
                                "numpy_type": "object", "metadata": None}]}
    table = pa.table({"task_index": pa.array(range(len(tasks)), pa.int64()), "__index_level_0__": tasks})
    return table.replace_schema_metadata({"pandas": json.dumps(pandas_meta)})


def _dump(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


class _Files:
    """The current file of a kind (data parquet or one key's video), started anew past ``max_mb``."""

    def __init__(self, root: Path, template: str, max_mb: float, **fmt):
        self.root, self.template, self.max_mb, self.fmt = root, template, max_mb, fmt
        self.n, self.handle, self.start = -1, None, 0   # file number, open writer, frames before the current file

    def path(self) -> Path:
        return self.root / self.template.format(**self.fmt, **chunk_file(self.n))

    def current(self, frames_so_far: int, open_new):
        """The open writer, a new one (via ``open_new(path)``) when there is none or the file is full."""
        if self.handle is None or (self.path().is_file() and self.path().stat().st_size / 2**20 >= self.max_mb):
            self.close()
            self.n, self.start = self.n + 1, frames_so_far
            self.path().parent.mkdir(parents=True, exist_ok=True)
            self.handle = open_new(self.path())
        return self.handle

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()
            self.handle = None


class DatasetWriter:
    """Collect frames into episodes and write them as a LeRobot v3.0 dataset at ``root``.

    features: ``{name: {"dtype": "float32" | ... | "image" | "video", "shape": [...], "names": [...]}}``;
    every frame must hold every feature (``next.reward`` and ``next.done`` are optional).
    """

    def __init__(self, root: str | Path, fps: float, features: dict, robot_type: str = "",
                 overwrite: bool = False):
        self.root = Path(root)
        if self.root.exists() and not overwrite:
            raise FileExistsError(f"{self.root} exists; pass overwrite=True or choose another folder")
        if not fps > 0:
            raise ValueError(f"fps must be positive, got {fps}")
        self.fps, self.robot_type = float(fps), robot_type
        self.features = {**validate_features(features), **STEP_FEATURES}
        self.video_keys = [k for k, f in self.features.items() if f["dtype"] == "video"]
        self.root.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = Path(tempfile.mkdtemp(prefix=f".{self.root.name}.tmp-", dir=self.root.parent))
        self.episodes: list[dict] = []
        self.tasks: dict[str, int] = {}
        self._stats: dict[str, list] = {k: [] for k in self.features}
        self._frames: list[dict[str, np.ndarray]] = []
        self._data = _Files(self.tmp, DATA_PATH, DATA_FILE_MB)
        self._videos = {k: _Files(self.tmp, VIDEO_PATH, VIDEO_FILE_MB, video_key=k) for k in self.video_keys}
        self.total_frames = 0
        self.finalized = False

    # --- frames and episodes ------------------------------------------------------------------
    def add_frame(self, frame: dict) -> None:
        """Append one frame to the current episode (values are checked for shape, dtype, finiteness)."""
        self._check_open()
        missing = [k for k, f in self.features.items() if k not in frame and k not in STEP_FEATURES]
        unknown = [k for k in frame if k not in self.features]
        if missing or unknown:
            raise ValueError(f"frame keys {sorted(frame)}: missing {missing}, unknown {unknown}; "
                             f"expected {sorted(self.features)}")
        checked = {}
        for k, v in frame.items():
            ft = self.features[k]
            a = np.asarray(v)
            shape = tuple(ft["shape"])
            if a.shape != shape and not (shape == (1,) and a.shape == ()):
                raise ValueError(f"feature {k!r} has shape {a.shape}, expected {shape}")
            if ft["dtype"] in ("image", "video"):
                if a.dtype != np.uint8:
                    raise ValueError(f"{ft['dtype']} {k!r} has dtype {a.dtype}, expected uint8 RGB (H, W, 3)")
            elif ft["dtype"] != "bool" and not np.all(np.isfinite(a.astype(np.float64))):
                raise ValueError(f"feature {k!r} has non-finite values {a}; NaN/inf frames are not stored")
            checked[k] = a.reshape(shape) if ft["dtype"] in ("image", "video") else a.reshape(shape).astype(ft["dtype"])
        self._frames.append(checked)

    def clear_episode(self) -> None:
        """Drop the frames of the current (unsaved) episode."""
        self._frames = []

    @property
    def num_episodes(self) -> int:
        return len(self.episodes)

    def save_episode(self, task: str = "") -> int:
        """Write the current episode's frames (parquet rows, video frames) and return its episode index."""
        self._check_open()
        if not self._frames:
            raise ValueError("save_episode() called with no frames; add_frame() first")
        ep, n = len(self.episodes), len(self._frames)
        task_index = self.tasks.setdefault(task, len(self.tasks))
        row = {"episode_index": ep, "tasks": [task], "length": n}
        cols = {}
        for k, ft in self.features.items():
            if k == "next.reward":
                values = np.array([f.get(k, 0.0) for f in self._frames], np.float32)
            elif k == "next.done":
                values = np.array([f.get(k, i == n - 1) for i, f in enumerate(self._frames)], bool)
            else:
                values = np.stack([f[k] for f in self._frames])
            pixels = ft["dtype"] in ("image", "video")
            self._stats[k].append(episode_stats(values, pixels=pixels))
            if ft["dtype"] == "video":
                row.update(self._add_video(k, values))
            elif ft["dtype"] == "image":
                cols[k] = _png_column(values, ep)
            else:
                cols[k] = _column(values, ft["dtype"], ft["shape"])
        frame_index = np.arange(n, dtype=np.int64)
        cols["timestamp"] = pa.array((frame_index / self.fps).astype(np.float32))
        cols["frame_index"] = pa.array(frame_index)
        cols["episode_index"] = pa.array(np.full(n, ep, np.int64))
        cols["index"] = pa.array(self.total_frames + frame_index)
        cols["task_index"] = pa.array(np.full(n, task_index, np.int64))
        table = pa.table(cols)
        self._data.current(self.total_frames, lambda p: pq.ParquetWriter(p, table.schema)).write_table(table)
        row.update({f"data/{k}": v for k, v in chunk_file(self._data.n).items()})
        row.update({"dataset_from_index": self.total_frames, "dataset_to_index": self.total_frames + n})
        self.episodes.append(row)
        self.total_frames += n
        self._frames = []
        return ep

    def _add_video(self, key: str, images: np.ndarray) -> dict:
        """Append an episode's frames to ``key``'s current video file; its episodes-table columns."""
        from .video import VideoEncoder

        files = self._videos[key]
        h, w = images.shape[1:3]
        enc = files.current(self.total_frames, lambda p: VideoEncoder(p, self.fps, h, w))
        start = enc.frames
        enc.add(images)
        return {**{f"videos/{key}/{k}": v for k, v in chunk_file(files.n).items()},
                f"videos/{key}/from_timestamp": start / self.fps,
                f"videos/{key}/to_timestamp": (start + len(images)) / self.fps}

    # --- finishing ----------------------------------------------------------------------------
    def finalize(self) -> Path:
        """Write the meta files and move the dataset into place at ``root``; returns ``root``."""
        self._check_open()
        if self._frames:
            raise ValueError(f"{len(self._frames)} frames were added but not saved; save_episode() or "
                             "clear_episode() before finalize()")
        if not self.episodes:
            raise ValueError("no episodes were saved; a dataset needs at least one")
        for files in (self._data, *self._videos.values()):
            files.close()
        features = {**self.features, **DEFAULT_FEATURES}
        for k in self.video_keys:
            from .video import video_info

            features[k] = {**features[k], "info": video_info(self.tmp / VIDEO_PATH.format(
                video_key=k, **chunk_file(0)))}
        n_ep = len(self.episodes)
        fps = int(round(self.fps)) if abs(self.fps - round(self.fps)) < 1e-6 else self.fps  # LeRobot: an int
        info = {
            "codebase_version": CODEBASE_VERSION, "robot_type": self.robot_type or None, "total_episodes": n_ep,
            "total_frames": self.total_frames, "total_tasks": len(self.tasks), "chunks_size": CHUNKS_SIZE,
            "data_files_size_in_mb": DATA_FILE_MB, "video_files_size_in_mb": VIDEO_FILE_MB, "fps": fps,
            "splits": {"train": f"0:{n_ep}"}, "data_path": DATA_PATH,
            "video_path": VIDEO_PATH if self.video_keys else None, "features": features,
        }
        rows = [{**e, "meta/episodes/chunk_index": 0, "meta/episodes/file_index": 0,
                 **{f"stats/{k}/{s}": v.tolist() for k, parts in self._stats.items() for s, v in parts[i].items()}}
                for i, e in enumerate(self.episodes)]
        path = self.tmp / EPISODES_PATH.format(**chunk_file(0))
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(rows), path)
        pq.write_table(tasks_table(list(self.tasks)), self.tmp / TASKS)
        stats = {k: aggregate_stats(parts) for k, parts in self._stats.items()}
        _dump(self.tmp / INFO, json.dumps(info, indent=4) + "\n")
        _dump(self.tmp / STATS, json.dumps(stats, indent=4) + "\n")
        old = None
        if self.root.exists():
            old = self.root.parent / f".{self.root.name}.old-{os.getpid()}"
            os.replace(self.root, old)
        os.replace(self.tmp, self.root)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        self.finalized = True
        return self.root

    def abort(self) -> None:
        """Discard everything written so far (``root`` is left as it was)."""
        for files in (self._data, *self._videos.values()):
            try:
                files.close()
            except Exception:  # a half-written file is removed below either way
                pass
        shutil.rmtree(self.tmp, ignore_errors=True)
        self.finalized = True

    def _check_open(self) -> None:
        if self.finalized:
            raise RuntimeError(f"the writer of {self.root} is already finalized or aborted")

    def __enter__(self) -> "DatasetWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()
        elif not self.finalized:
            self.finalize()
