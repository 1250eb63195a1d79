"""``robo`` as a user types it, in-process: bad inputs end in one line and exit code 2, and leave no run folder."""

from types import SimpleNamespace

import pytest

import robo.cli as cli


def failing(capsys, *argv) -> tuple[int, str]:
    with pytest.raises(SystemExit) as e:
        cli.main(list(argv))
    return e.value.code, capsys.readouterr().err


@pytest.fixture
def truncated_checkpoint(tmp_path):
    from policies.foundation import load_raptor

    ckpt = load_raptor().save(tmp_path / "ckpt")
    weights = ckpt / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    return ckpt


@pytest.mark.parametrize("argv, message", [
    (["eval", "policy=checkpoint", "policy.path=/nonexistent"], "eval: policy.path=/nonexistent: no such file"),
    (["train", "algo.kwargs.learning_rate=-1"], "train: algo.kwargs.learning_rate=-1: must be > 0"),
    (["eval", "seconds=-3"], "eval: seconds=-3: must be > 0"),
    (["eval", "seconds=abc"], "eval: seconds='abc': must be a number"),
    (["record", "episodes=0"], "record: episodes=0: must be > 0"),
    (["eval", "robot=foo"], "eval: unknown robot 'foo'; choose one of crazyflie, racer5, x500"),
    (["train", "task=nope"], "train: unknown task 'nope'; choose one of figure_eight, gym_pusht"),
    (["eval", "policy=checkpoint"], "eval: policy.path is required"),
    (["train", "resume=/nonexistent"], "train: resume=/nonexistent: no such file or folder"),
    (["nope"], "robo: unknown command 'nope'"),
])
def test_bad_input_is_one_line_exit_2_and_no_run_folder(tmp_path, capsys, argv, message):
    run = tmp_path / "run"
    code, err = failing(capsys, *argv, f"hydra.run.dir={run}")
    assert code == 2 and message in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not run.exists()


def test_a_corrupt_checkpoint_is_named(tmp_path, capsys, truncated_checkpoint):
    code, err = failing(capsys, "eval", "policy=checkpoint", f"policy.path={truncated_checkpoint}",
                        f"hydra.run.dir={tmp_path / 'run'}")
    assert code == 2 and "model.safetensors is corrupt or truncated" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "run").exists()


def test_a_resume_folder_must_be_a_run(tmp_path, capsys):
    code, err = failing(capsys, "train", f"resume={tmp_path}")
    assert code == 2 and "not a robo train run folder (config.yaml is missing)" in err


def fake_command(run):
    return lambda name: SimpleNamespace(run=run)


def test_a_failure_during_the_run_removes_a_folder_with_only_config_and_log(tmp_path, capsys, monkeypatch):
    def run(cfg, run_dir):
        (run_dir / "config.yaml").write_text("seed: 0\n")
        raise ValueError("the robot is not armed")

    monkeypatch.setattr(cli, "command_module", fake_command(run))
    code, err = failing(capsys, "eval", f"hydra.run.dir={tmp_path / 'run'}")
    assert code == 2 and err.strip() == "robo eval: the robot is not armed (no run folder kept)"
    assert not (tmp_path / "run").exists()


def test_a_failure_after_results_keeps_the_folder_marked_failed(tmp_path, capsys, monkeypatch):
    def run(cfg, run_dir):
        (run_dir / "checkpoints").mkdir()
        raise RuntimeError("diverged")

    monkeypatch.setattr(cli, "command_module", fake_command(run))
    code, err = failing(capsys, "eval", f"hydra.run.dir={tmp_path / 'run'}")
    assert code == 1 and "RuntimeError: diverged" in err and "ROBO_DEBUG=1" in err
    assert "RuntimeError: diverged" in (tmp_path / "run" / "FAILED").read_text()


def test_robo_debug_shows_the_traceback(tmp_path, monkeypatch):
    monkeypatch.setenv("ROBO_DEBUG", "1")
    monkeypatch.setattr(cli, "command_module", fake_command(lambda cfg, run_dir: 1 / 0))
    with pytest.raises(BaseException):  # Hydra reports the ZeroDivisionError with its traceback
        cli.main(["eval", f"hydra.run.dir={tmp_path / 'run'}"])


def test_help_lists_each_command_in_one_line(capsys):
    cli.main(["--help"])
    out = capsys.readouterr().out
    for name, (_, about) in cli.COMMANDS.items():
        assert f"  {name}" in out and about in out


def test_command_help_names_only_the_commands_groups(capsys):
    cli.main(["train", "--help"])
    out = capsys.readouterr().out
    assert "robot        crazyflie|racer5|x500 (default: crazyflie)" in out
    assert "algo " in out and "total_steps: 400000" in out
    assert "real_robot" not in out and "twin" not in out and "hydra:" not in out
    assert len(out.splitlines()) < 80


def test_an_actor_trained_on_a_longer_observation_names_its_runs_settings(tmp_path, capsys):
    from policies.mlp import MLPConfig, MLPPolicy

    run = tmp_path / "train_run"
    policy = MLPPolicy(MLPConfig(obs_dim=25)).save(run / "checkpoints" / "best" / "policy")
    (run / "config.yaml").write_text("task:\n  name: hover\n  action_history: 0\n  position_integral: 0.5\n")
    code, err = failing(capsys, "eval", "policy=checkpoint", f"policy.path={policy}", "video.enabled=false",
                        f"hydra.run.dir={tmp_path / 'eval'}")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "the policy reads 25 observation floats, task hover gives 22" in err
    assert "task.action_history=0 task.position_integral=0.5" in err
    assert not (tmp_path / "eval").exists()
