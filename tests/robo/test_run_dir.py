"""The run skeleton: seeds, checkpoint folders, and resuming a run from its own saved config."""

import json
import logging
import math
import random

import numpy as np
import pytest
import torch
import yaml
from omegaconf import OmegaConf

from policies.checkpoint import remove_unfinished
from robo.commands.imitation import RESUMABLE_CHANGES
from robo.run_dir import (checkpoint, finish_interrupted_writes, read_json, read_state, resume_config, rng_state,
                          seed_run, set_rng_state, with_run_groups, write_checkpoint, write_json,
                          write_resolved_config)
from tests.hydra_configs import composed


class Saved:
    """Stands in for a policy: ``save(dir)`` writes one file."""

    def __init__(self, text: str):
        self.text = text

    def save(self, directory):
        directory.mkdir(parents=True)
        (directory / "weights.txt").write_text(self.text)


def test_checkpoint_folders_are_replaced_whole_or_not_at_all(tmp_path):
    best = tmp_path / "checkpoints" / "best"
    write_checkpoint(best, Saved("a"), {"step": 1, "error": np.float32(0.5)}, "metrics.json")
    assert read_state(best, "metrics.json") == {"step": 1, "error": 0.5} and read_state(best) is None
    assert (best / "policy" / "weights.txt").read_text() == "a"
    with pytest.raises(RuntimeError):
        with checkpoint(best, Saved("b"), {"step": 2}, "metrics.json") as tmp:
            (tmp / "half.bin").write_bytes(b"x")
            raise RuntimeError("killed while writing")
    assert read_state(best, "metrics.json")["step"] == 1 and not (best / "half.bin").exists()
    assert [p.name for p in best.parent.iterdir()] == ["best"]  # no temporary left behind


def test_remove_unfinished_clears_temporaries_and_puts_back_an_interrupted_replace(tmp_path):
    latest = tmp_path / "latest"
    (tmp_path / ".latest.tmp-abc").mkdir()
    (tmp_path / ".latest.old-123").mkdir()  # killed between the two renames: latest itself is gone
    (tmp_path / ".latest.old-123" / "state.json").write_text('{"step": 7}')
    remove_unfinished(latest)
    assert read_state(latest) == {"step": 7} and [p.name for p in tmp_path.iterdir()] == ["latest"]


def test_seed_run_repeats_every_generator_and_rng_state_carries_them_over():
    def draws():
        return torch.rand(2).tolist(), np.random.rand(2).tolist(), random.random()

    seed_run(3)
    first = draws()
    seed_run(3)
    assert draws() == first
    sampler = torch.Generator().manual_seed(1)
    state = rng_state(sampler)
    after = draws(), torch.rand(1, generator=sampler).item()
    set_rng_state(state, sampler)
    assert (draws(), torch.rand(1, generator=sampler).item()) == after


IMITATION = ["policy=diffusion", "task=obstacle_reach", "policy.horizon=8", "policy.train.steps=20"]


@pytest.fixture
def imitation_run(tmp_path):
    """A run folder as ``robo train`` leaves it: config.yaml and Hydra's record of the command line."""
    run = tmp_path / "run"
    write_resolved_config(run, composed("train", *IMITATION))
    (run / ".hydra").mkdir()
    (run / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(IMITATION))
    choices = {"policy": "diffusion", "task": "obstacle_reach", "algo": "sac", "robot": "crazyflie"}
    (run / ".hydra" / "hydra.yaml").write_text(yaml.safe_dump({"hydra": {"runtime": {"choices": choices}}}))
    return run


def resumed(run, *typed):
    """What ``robo train resume=<run> <typed>`` continues with."""
    overrides = with_run_groups([*typed, f"resume={run}"])
    return OmegaConf.to_container(resume_config(composed("train", *overrides), RESUMABLE_CHANGES, "train",
                                                typed=overrides))


def test_resume_continues_from_the_runs_own_config(imitation_run):
    assert with_run_groups([f"resume={imitation_run}"]) == ["policy=diffusion", "task=obstacle_reach",
                                                            f"resume={imitation_run}"]
    saved = OmegaConf.to_container(OmegaConf.load(imitation_run / "config.yaml"))
    assert resumed(imitation_run) == {**saved, "resume": str(imitation_run)}
    assert resumed(imitation_run, *IMITATION) == {**saved, "resume": str(imitation_run)}  # typed again: no change


def test_resume_applies_safe_overrides_and_refuses_the_others(imitation_run, caplog):
    with caplog.at_level(logging.INFO, logger="robo.run_dir"):
        c = resumed(imitation_run, "policy.train.steps=30", "threads=2")
    assert c["policy"]["train"]["steps"] == 30 and c["threads"] == 2 and c["policy"]["horizon"] == 8
    assert "resume: applying policy.train.steps=30" in caplog.text and "resume: applying threads=2" in caplog.text
    with pytest.raises(ValueError, match=r"cannot change on resume: policy.horizon \(the run has 8, given 16\); "
                                         r"seed \(the run has 0, given 1\)\. Resume .* only the keys that may change"):
        resumed(imitation_run, "policy.horizon=16", "seed=1")
    with pytest.raises(ValueError, match=r"task \(the run has obstacle_reach, given pusht\)"):
        resumed(imitation_run, "task=pusht")


def test_resume_fills_keys_added_since_and_drops_keys_removed_since(imitation_run, caplog):
    saved = OmegaConf.to_container(OmegaConf.load(imitation_run / "config.yaml"))
    del saved["policy"]["train"]["keep_every"]  # a key a newer robo added
    saved["policy"]["retired"] = 1  # and one it removed
    (imitation_run / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(saved)))
    with caplog.at_level(logging.INFO, logger="robo.run_dir"):
        c = resumed(imitation_run)
    assert c["policy"]["train"]["keep_every"] == 0 and "retired" not in c["policy"]
    assert "policy.train.keep_every is not in the run's config.yaml (added since)" in caplog.text
    assert "policy.retired is no longer a robo setting" in caplog.text


def test_resume_of_a_folder_without_config_says_so(tmp_path):
    with pytest.raises(FileNotFoundError, match="is .* a robo train run folder"):
        resume_config(composed("train", f"resume={tmp_path}"), RESUMABLE_CHANGES, "train", typed=[])


def test_metrics_are_strict_json_with_the_reason_for_each_null(tmp_path):
    """No Infinity or NaN for strict readers: null plus <key>_null_reason, restored on reading back."""
    metrics = {"final_median_position_error": float("inf"), "rmse": np.float32("nan"), "crashes": np.int64(256),
               "drift": -math.inf, "errors": [0.01, float("inf")], "nested": [{"x": float("nan")}], "ok": 0.5}
    write_json(tmp_path / "m.json", metrics)
    text = (tmp_path / "m.json").read_text()
    assert "Infinity" not in text and "NaN" not in text
    raw = json.loads(text, parse_constant=lambda c: pytest.fail(f"non-strict constant {c}"))
    assert raw["final_median_position_error"] is None and raw["final_median_position_error_null_reason"] == "+inf"
    assert raw["rmse"] is None and raw["rmse_null_reason"] == "nan" and raw["drift_null_reason"] == "-inf"
    assert raw["crashes"] == 256 and raw["ok"] == 0.5
    assert raw["errors"] == [0.01, None] and "not finite" in raw["errors_null_reason"]
    assert raw["nested"] == [{"x": None, "x_null_reason": "nan"}]
    back = read_json(tmp_path / "m.json")
    assert back["final_median_position_error"] == math.inf and math.isnan(back["rmse"]) and back["drift"] == -math.inf
    assert "final_median_position_error_null_reason" not in back and math.isnan(back["nested"][0]["x"])
    write_checkpoint(tmp_path / "best", state=metrics, state_file="metrics.json")
    assert "Infinity" not in (tmp_path / "best" / "metrics.json").read_text()
    assert read_state(tmp_path / "best", "metrics.json")["final_median_position_error"] == math.inf


def test_a_resume_finishes_the_checkpoint_writes_a_kill_cut_short(tmp_path):
    """SIGKILL between atomic_directory's two renames leaves no checkpoints/latest, only its previous version
    (.latest.old-<pid>) and maybe a temporary folder: finish_interrupted_writes puts the previous version back and
    clears the temporaries, anywhere in the run (population members too)."""
    ckpt = tmp_path / "checkpoints"
    write_checkpoint(ckpt / "latest", state={"step": 4096})
    (ckpt / "latest").rename(ckpt / ".latest.old-4242")       # killed after the first rename
    (ckpt / ".latest.tmp-abc").mkdir()                        # the new version, not renamed yet
    member = tmp_path / "members" / "3" / "checkpoints"
    write_checkpoint(member / "best", state={"step": 10})
    (member / ".best.tmp-xyz").mkdir()                        # killed while writing, the old one intact
    (tmp_path / ".hydra").mkdir()
    repaired = finish_interrupted_writes(tmp_path)
    assert sorted(repaired) == sorted([ckpt / "latest", member / "best"])
    assert read_state(ckpt / "latest")["step"] == 4096 and read_state(member / "best")["step"] == 10
    assert not list(ckpt.glob(".latest.*")) and not list(member.glob(".best.*")) and (tmp_path / ".hydra").is_dir()
    assert finish_interrupted_writes(tmp_path) == []
