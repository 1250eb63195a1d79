"""LeRobot v3.0 datasets: exact round trips, layout and stats, atomic writes, v2.x conversion, clear errors."""

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from robo.datasets import DatasetWriter, LeRobotDataset, convert_legacy
from robo.datasets.video import VideoEncoder

FEATURES = {
    "observation.state": {"dtype": "float32", "shape": [5], "names": ["a", "b", "c", "d", "e"]},
    "action": {"dtype": "float32", "shape": [2], "names": ["x", "y"]},
    "observation.image": {"dtype": "image", "shape": [8, 6, 3], "names": ["height", "width", "channel"]},
}


def _episodes(rng, lengths=(4, 7, 1)):
    eps = []
    for n in lengths:
        eps.append([{"observation.state": (rng.standard_normal(5) * 10.0 ** rng.integers(-30, 30)).astype(np.float32),
                     "action": rng.standard_normal(2).astype(np.float32),
                     "observation.image": rng.integers(0, 256, (8, 6, 3), dtype=np.uint8),
                     "next.reward": np.float32(rng.random())} for _ in range(n)])
    return eps


def _write(root, episodes, features=FEATURES, **kw):
    with DatasetWriter(root, fps=10, features=features, robot_type="test", **kw) as w:
        for ep in episodes:
            for f in ep:
                w.add_frame(f)
            w.save_episode("push")
    return root


def test_round_trip_is_exact(tmp_path):
    eps = _episodes(np.random.default_rng(0))
    ds = LeRobotDataset(_write(tmp_path / "ds", eps))
    assert ds.num_episodes == 3 and ds.num_frames == 12 and ds.fps == 10.0
    for i, ep in enumerate(eps):
        got = ds.episode(i)
        for key in FEATURES:
            want = np.stack([f[key] for f in ep])
            assert got[key].dtype == want.dtype
            assert got[key].tobytes() == want.tobytes(), key  # bit for bit
        np.testing.assert_array_equal(got["next.reward"], [f["next.reward"] for f in ep])
        assert got["next.done"].tolist() == [False] * (len(ep) - 1) + [True]
        np.testing.assert_array_equal(got["frame_index"], np.arange(len(ep)))
        np.testing.assert_allclose(got["timestamp"], np.arange(len(ep)) / 10.0, rtol=1e-6)
        assert set(got["episode_index"]) == {i}
    np.testing.assert_array_equal(ds.data["index"], np.arange(12))


def test_layout_and_metadata_follow_lerobot_v3(tmp_path):
    eps = _episodes(np.random.default_rng(1))
    root = _write(tmp_path / "ds", eps)
    info = json.loads((root / "meta/info.json").read_text())
    assert info["codebase_version"] == "v3.0" and info["fps"] == 10
    assert info["total_episodes"] == 3 and info["total_frames"] == 12 and info["total_tasks"] == 1
    assert info["features"]["action"] == FEATURES["action"]
    assert {"timestamp", "frame_index", "episode_index", "index", "task_index", "next.reward",
            "next.done"} <= set(info["features"])
    table = pq.read_table(root / "data/chunk-000/file-000.parquet")
    assert {"observation.state", "action", "observation.image", "next.reward", "next.done", "episode_index",
            "frame_index", "timestamp", "index", "task_index"} == set(table.column_names) and table.num_rows == 12
    episodes = pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    assert [(e["episode_index"], e["length"], e["tasks"], e["dataset_from_index"]) for e in episodes] == [
        (0, 4, ["push"], 0), (1, 7, ["push"], 4), (2, 1, ["push"], 11)]
    actions = [np.stack([f["action"] for f in ep]).astype(np.float64) for ep in eps]
    np.testing.assert_allclose(episodes[1]["stats/action/mean"], actions[1].mean(0), rtol=1e-12)  # per episode
    np.testing.assert_allclose(episodes[1]["stats/action/q50"], np.median(actions[1], 0), rtol=1e-12)
    assert np.shape(episodes[0]["stats/observation.image/mean"]) == (3, 1, 1)
    stats = json.loads((root / "meta/stats.json").read_text())
    actions = np.concatenate(actions)
    np.testing.assert_allclose(stats["action"]["mean"], actions.mean(0), rtol=1e-12)
    np.testing.assert_allclose(stats["action"]["std"], actions.std(0), rtol=1e-9)
    np.testing.assert_array_equal(stats["action"]["min"], actions.min(0))
    assert stats["action"]["count"] == [12] and stats["observation.image"]["count"] == [12]
    norm = LeRobotDataset(root).normalization_stats()
    assert norm["action"]["min"].shape == (2,) and norm["obs"]["std"].shape == (5,)
    np.testing.assert_allclose(norm["action"]["max"].numpy(), actions.max(0), rtol=1e-6)
    images = np.stack([f["observation.image"] for ep in eps for f in ep]) / 255.0
    np.testing.assert_allclose(np.asarray(stats["observation.image"]["mean"]).ravel(), images.mean((0, 1, 2)))


def test_video_round_trip_is_close(tmp_path):
    y, x = np.mgrid[:32, :32]
    frames = np.stack([np.stack([128 + 90 * np.sin(x / 7 + t / 2 + c) for c in range(3)], -1)
                       for t in range(9)]).astype(np.uint8)
    features = {"action": FEATURES["action"], "observation.cam": {"dtype": "video", "shape": [32, 32, 3]}}
    with DatasetWriter(tmp_path / "ds", fps=10, features=features) as w:
        for length, start in ((4, 0), (5, 4)):
            for t in range(start, start + length):
                w.add_frame({"action": np.zeros(2, np.float32), "observation.cam": frames[t]})
            w.save_episode("look")
    ds = LeRobotDataset(tmp_path / "ds")
    assert ds.video_keys == ["observation.cam"]
    assert (tmp_path / "ds/videos/observation.cam/chunk-000/file-000.mp4").is_file()
    assert ds.info["features"]["observation.cam"]["info"]["video.codec"] == "av1"
    got = np.concatenate([ds.episode(i)["observation.cam"] for i in range(2)])
    assert got.shape == frames.shape and np.abs(got.astype(int) - frames).mean() < 4
    assert ds.episodes[1]["videos/observation.cam/from_timestamp"] == pytest.approx(0.4)


def test_failed_write_leaves_nothing_and_keeps_the_old_dataset(tmp_path):
    eps = _episodes(np.random.default_rng(2))
    with pytest.raises(RuntimeError, match="killed"):
        with DatasetWriter(tmp_path / "ds", fps=10, features=FEATURES) as w:
            for f in eps[0]:
                w.add_frame(f)
            w.save_episode()
            raise RuntimeError("killed mid-write")
    assert list(tmp_path.iterdir()) == []
    _write(tmp_path / "ds", eps[:1])
    with pytest.raises(RuntimeError):
        with DatasetWriter(tmp_path / "ds", fps=10, features=FEATURES, overwrite=True) as w:
            w.add_frame(eps[1][0])
            raise RuntimeError("killed mid-write")
    assert [p.name for p in tmp_path.iterdir()] == ["ds"] and LeRobotDataset(tmp_path / "ds").num_episodes == 1
    # a writer that is never finalized (the process dies) publishes nothing at the target
    w = DatasetWriter(tmp_path / "new", fps=10, features=FEATURES)
    w.add_frame(eps[0][0])
    w.save_episode()
    assert not (tmp_path / "new").exists()
    w.abort()


def test_bad_input_raises_clear_errors(tmp_path):
    eps = _episodes(np.random.default_rng(4))
    w = DatasetWriter(tmp_path / "ds", fps=10, features=FEATURES)
    good = eps[0][0]
    with pytest.raises(ValueError, match=r"'action' has shape \(3,\), expected \(2,\)"):
        w.add_frame({**good, "action": np.zeros(3, np.float32)})
    with pytest.raises(ValueError, match="non-finite"):
        w.add_frame({**good, "observation.state": np.array([0, np.nan, 0, 0, 0], np.float32)})
    with pytest.raises(ValueError, match="missing"):
        w.add_frame({"action": good["action"]})
    with pytest.raises(ValueError, match="uint8"):
        w.add_frame({**good, "observation.image": good["observation.image"].astype(np.float32)})
    with pytest.raises(ValueError, match="no frames"):
        w.save_episode()
    with pytest.raises(ValueError, match="no episodes"):
        w.finalize()
    w.abort()
    with pytest.raises(ValueError, match="dtype"):
        DatasetWriter(tmp_path / "x", fps=10, features={"a": {"dtype": "float16", "shape": [1]}})
    root = _write(tmp_path / "ds", eps)
    with pytest.raises(FileExistsError, match="overwrite=True"):
        DatasetWriter(root, fps=10, features=FEATURES)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        LeRobotDataset(tmp_path / "nope")
    (root / "data/chunk-000/file-000.parquet").unlink()
    with pytest.raises(FileNotFoundError, match="no chunk-"):
        LeRobotDataset(root)
    info = json.loads((root / "meta/info.json").read_text())
    (root / "meta/info.json").write_text(json.dumps({**info, "codebase_version": "v2.1"}))
    with pytest.raises(ValueError, match="robo record convert="):
        LeRobotDataset(root)


def _write_v2(root, eps, version, images):
    """A v2.x folder as robo 0.1 wrote it (``images="png"``: PNG files, meta/stats.json) or as LeRobot did
    (``"bytes"``: PNG bytes in the parquet; ``"video"``: one mp4 per episode; meta/episodes_stats.jsonl)."""
    import cv2
    import pyarrow as pa

    dtype = "video" if images == "video" else "image"
    features = {**{k: v for k, v in FEATURES.items() if k != "observation.image"},
                "observation.image": {**FEATURES["observation.image"], "dtype": dtype},
                "next.reward": {"dtype": "float32", "shape": [1], "names": None}}
    info = {"codebase_version": version, "fps": 10, "chunks_size": 1000, "features": features,
            "data_path": "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet",
            "video_path": "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4",
            "image_path": "images/{image_key}/episode_{episode_index:06d}/frame_{frame_index:06d}.png"}
    (root / "meta").mkdir(parents=True)
    (root / "meta/info.json").write_text(json.dumps(info))
    (root / "meta/tasks.jsonl").write_text('{"task_index": 0, "task": "push"}\n')
    (root / "meta/episodes.jsonl").write_text("".join(json.dumps({"episode_index": i, "tasks": ["push"],
                                                                  "length": len(ep)}) + "\n"
                                                      for i, ep in enumerate(eps)))
    for i, ep in enumerate(eps):
        imgs = np.stack([f["observation.image"] for f in ep])
        cols = {k: pa.FixedSizeListArray.from_arrays(pa.array(np.stack([f[k] for f in ep]).ravel()), len(ep[0][k]))
                for k in ("observation.state", "action")}
        cols.update({"next.reward": pa.array([f["next.reward"] for f in ep]), "task_index": pa.array([0] * len(ep)),
                     "timestamp": pa.array(np.arange(len(ep), dtype=np.float32) / 10)})
        if images == "bytes":
            cols["observation.image"] = pa.array([{"bytes": cv2.imencode(".png", im[:, :, ::-1])[1].tobytes(),
                                                   "path": None} for im in imgs])
        for t, im in enumerate(imgs if images == "png" else []):
            path = root / info["image_path"].format(image_key="observation.image", episode_index=i, frame_index=t)
            path.parent.mkdir(parents=True, exist_ok=True)
            cv2.imwrite(str(path), im[:, :, ::-1])
        if images == "video":
            enc = VideoEncoder(root / info["video_path"].format(episode_chunk=0, video_key="observation.image",
                                                                episode_index=i), 10, 8, 6)
            enc.add(imgs)
            enc.close()
        path = root / info["data_path"].format(episode_chunk=0, episode_index=i)
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table(cols), path)
    return root


@pytest.mark.parametrize("version,images", [("v2.0", "png"), ("v2.1", "bytes"), ("v2.1", "video")])
def test_convert_a_v2_dataset(tmp_path, version, images):
    eps = _episodes(np.random.default_rng(5), lengths=(3, 6))
    old = _write_v2(tmp_path / "old", eps, version, images)
    summary = convert_legacy(old, tmp_path / "new")
    assert summary["episodes"] == 2 and summary["frames"] == 9 and summary["from_version"] == version
    ds = LeRobotDataset(tmp_path / "new")
    assert ds.tasks == {0: "push"} and ds.info["codebase_version"] == "v3.0"
    for i, ep in enumerate(eps):
        got = ds.episode(i)
        for key in ("observation.state", "action", "next.reward"):
            assert got[key].tobytes() == np.stack([f[key] for f in ep]).tobytes(), key
        want = np.stack([f["observation.image"] for f in ep])
        if images == "video":  # decoded from the old mp4 and encoded again: lossy, the frames in order
            assert got["observation.image"].shape == want.shape and ds.video_keys == ["observation.image"]
        else:
            assert got["observation.image"].tobytes() == want.tobytes()
    with pytest.raises(ValueError, match="takes v2.0 or v2.1"):
        convert_legacy(tmp_path / "new", tmp_path / "again")
