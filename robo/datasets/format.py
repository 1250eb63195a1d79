"""The on-disk layout: LeRobot's dataset format v3.0 (what LeRobot 0.4 reads and writes).

::

    <root>/
      meta/info.json                                fps, features {name: {dtype, shape, names}}, totals, templates
      meta/stats.json                               per feature: min, max, mean, std, count, q01 .. q99
      meta/tasks.parquet                            task strings (the pandas index) -> task_index
      meta/episodes/chunk-000/file-000.parquet      one row per episode: length, tasks, frame range, the data and
                                                    video files it lies in, its own stats ("stats/<feature>/<stat>")
      data/chunk-000/file-000.parquet               frames of many episodes, one row per frame
      videos/<key>/chunk-000/file-000.mp4           frames of many episodes, one after another (AV1, yuv420p)

A frame row holds one column per non-video feature (fixed-size lists of numbers for vectors, PNG bytes as
``{"bytes", "path"}`` for ``image`` features) plus ``timestamp`` (s, from the episode start), ``frame_index``,
``episode_index``, ``index`` (over the dataset) and ``task_index``. ``action`` at frame t is the action taken
after observing frame t. Image and video stats are per channel, shape (3, 1, 1), of pixels scaled to [0, 1].
"""

from __future__ import annotations

import numpy as np

CODEBASE_VERSION = "v3.0"
LEGACY_VERSIONS = ("v2.0", "v2.1")
CHUNKS_SIZE = 1000               # files per chunk folder
DATA_FILE_MB, VIDEO_FILE_MB = 100, 200   # a new data / video file is started past these sizes
CHUNK_FILE = "chunk-{chunk_index:03d}/file-{file_index:03d}"
DATA_PATH = "data/" + CHUNK_FILE + ".parquet"
VIDEO_PATH = "videos/{video_key}/" + CHUNK_FILE + ".mp4"
EPISODES_PATH = "meta/episodes/" + CHUNK_FILE + ".parquet"
INFO, STATS, TASKS = "meta/info.json", "meta/stats.json", "meta/tasks.parquet"
QUANTILES = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}  # LeRobot's default quantiles

# Columns every dataset has, written by the writer (not passed in frames).
DEFAULT_FEATURES = {
    "timestamp": {"dtype": "float32", "shape": [1], "names": None},
    "frame_index": {"dtype": "int64", "shape": [1], "names": None},
    "episode_index": {"dtype": "int64", "shape": [1], "names": None},
    "index": {"dtype": "int64", "shape": [1], "names": None},
    "task_index": {"dtype": "int64", "shape": [1], "names": None},
}
# Per-frame scalars that frames may carry (defaults: reward 0, done on the last frame).
STEP_FEATURES = {
    "next.reward": {"dtype": "float32", "shape": [1], "names": None},
    "next.done": {"dtype": "bool", "shape": [1], "names": None},
}
NUMERIC_DTYPES = ("float32", "float64", "int64", "int32", "bool")
PIXEL_DTYPES = ("image", "video")


def chunk_file(n: int) -> dict[str, int]:
    """The n-th file of a kind (0, 1, ..) -> {"chunk_index", "file_index"} (``CHUNKS_SIZE`` files a chunk)."""
    return {"chunk_index": n // CHUNKS_SIZE, "file_index": n % CHUNKS_SIZE}


def validate_features(features: dict) -> dict:
    """Check ``{name: {"dtype", "shape", "names"?}}`` and return it normalized (shape as a list)."""
    out = {}
    for name, ft in features.items():
        if not isinstance(ft, dict) or "dtype" not in ft or "shape" not in ft:
            raise ValueError(f"feature {name!r} must be a dict with 'dtype' and 'shape', got {ft!r}")
        dtype, shape = ft["dtype"], [int(s) for s in ft["shape"]]
        if dtype in PIXEL_DTYPES:
            if len(shape) != 3 or shape[2] != 3:
                raise ValueError(f"{dtype} feature {name!r} needs shape [height, width, 3], got {shape}")
        elif dtype not in NUMERIC_DTYPES:
            raise ValueError(f"feature {name!r} has dtype {dtype!r}; use one of {PIXEL_DTYPES + NUMERIC_DTYPES}")
        if name in DEFAULT_FEATURES or "/" in name:
            raise ValueError(f"feature name {name!r} is reserved or holds '/'; choose another name")
        out[name] = {"dtype": dtype, "shape": shape, "names": ft.get("names")}
    return out


def episode_stats(x: np.ndarray, pixels: bool = False) -> dict[str, np.ndarray]:
    """LeRobot's per-episode stats of x (T, ...) over frames: min, max, mean, std, count (1,), q01 .. q99.

    ``pixels``: x is uint8 images (T, H, W, 3); stats are per channel of x / 255, each of shape (3, 1, 1)."""
    count = np.array([len(x)])  # frames (LeRobot counts images, not pixels)
    if pixels:
        x = x.reshape(-1, 3).astype(np.float64) / 255.0
        shape = lambda a: np.asarray(a).reshape(3, 1, 1)  # noqa: E731
    else:
        x = np.asarray(x, dtype=np.float64).reshape(len(x), -1)
        shape = lambda a: np.asarray(a).reshape(-1)  # noqa: E731
    out = {"min": shape(x.min(0)), "max": shape(x.max(0)), "mean": shape(x.mean(0)), "std": shape(x.std(0)),
           "count": count}
    for name, q in QUANTILES.items():
        out[name] = shape(np.quantile(x, q, axis=0))
    return out


def aggregate_stats(parts: list[dict[str, np.ndarray]]) -> dict[str, list]:
    """Combine per-episode stats into the dataset's, as LeRobot does: min / max over episodes, mean and std by
    the parallel-variance formula, quantiles as the count-weighted mean of the episodes' quantiles."""
    n = np.array([float(p["count"][0]) for p in parts])
    w = n / n.sum()
    mean = sum(p["mean"] * k for p, k in zip(parts, w))
    var = sum((p["std"] ** 2 + (p["mean"] - mean) ** 2) * k for p, k in zip(parts, w))
    out = {"min": np.min([p["min"] for p in parts], axis=0), "max": np.max([p["max"] for p in parts], axis=0),
           "mean": mean, "std": np.sqrt(var), "count": np.array([int(n.sum())])}
    for name in QUANTILES:
        if all(name in p for p in parts):
            out[name] = sum(p[name] * k for p, k in zip(parts, w))
    return {k: v.tolist() for k, v in out.items()}
