"""The ``robo`` command line, run as a user would (subprocesses)."""

import json

import cv2

from tests.robo.cli_run import robo


def test_eval_writes_a_complete_run_folder(tmp_path):
    run = tmp_path / "run"
    r = robo("eval", "num_envs=8", "seconds=1", "video.width=96", "video.height=64", "video.fps=20",
             f"hydra.run.dir={run}", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "final_median_position_error" in r.stdout
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["crashes"] == 0 and metrics["num_envs"] == 8
    assert "preset: crazyflie" in (run / "config.yaml").read_text()
    assert (run / "eval.log").read_text().count("INFO") > 3
    assert (run / "checkpoints" / "policy" / "model.safetensors").exists()
    assert cv2.imread(str(run / "plots" / "trajectories.png")) is not None
    video = cv2.VideoCapture(str(run / "videos" / "flight.mp4"))
    assert int(video.get(cv2.CAP_PROP_FRAME_COUNT)) == 21


def test_multirun_sweeps_robots(tmp_path):
    sweep = tmp_path / "sweep"
    r = robo("eval", "-m", "robot=crazyflie,x500", "num_envs=4", "seconds=0.5", "video.enabled=false",
             f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    robots = sorted(json.loads((sweep / d / "metrics.json").read_text())["robot"] for d in ("0", "1"))
    assert robots == ["crazyflie", "x500"]


def test_saved_checkpoint_can_be_evaluated_again(tmp_path):
    run = tmp_path / "first"
    assert robo("eval", "num_envs=4", "seconds=0.5", "video.enabled=false", f"hydra.run.dir={run}",
                cwd=tmp_path).returncode == 0
    again = tmp_path / "again"
    r = robo("eval", "policy=checkpoint", f"policy.path={run / 'checkpoints' / 'policy'}", "num_envs=4",
             "seconds=0.5", "video.enabled=false", f"hydra.run.dir={again}", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    a, b = (json.loads((d / "metrics.json").read_text()) for d in (run, again))
    assert a["final_median_position_error"] == b["final_median_position_error"]


def test_bad_input_gets_a_clear_error(tmp_path):
    r = robo("eval", "nonsense=1", cwd=tmp_path)
    assert r.returncode == 2 and "nonsense" in r.stderr
    r = robo("eval", "robot.preset=hummingbird", "video.enabled=false", f"hydra.run.dir={tmp_path / 'run'}",
             cwd=tmp_path)
    assert r.returncode == 2 and "unknown quadrotor preset 'hummingbird'" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "run").exists()
    r = robo("eval", "policy=checkpoint", "policy.path=/nonexistent", "video.enabled=false", cwd=tmp_path)
    assert r.returncode == 2 and "policy.path=/nonexistent: no such file or folder" in r.stderr
    r = robo("train", "task=hover", f"extra_dataset={tmp_path}", cwd=tmp_path)  # an imitation setting on an RL task
    assert r.returncode == 2 and "extra_dataset: imitation settings" in r.stderr
    r = robo("fly", cwd=tmp_path)
    assert r.returncode == 2 and "unknown command 'fly'" in r.stderr


def test_help_lists_commands(tmp_path):
    r = robo(cwd=tmp_path)
    assert r.returncode == 0 and "  eval " in r.stdout and "  train " in r.stdout
