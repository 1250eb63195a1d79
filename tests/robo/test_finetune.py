"""Real-robot fine-tuning on the stand-in PX4 robot: learner in another process, killed and resumed."""

import json
import os
import signal

import numpy as np
import pytest

from hardware.drivers.base import RobotError
from policies.foundation import load_raptor
from robo.real import RobotEnv, RobotEnvConfig
from robo.real.finetune import FinetuneConfig, FlyBack, HumanPrompt, ResidualAdapter, finetune
from robo.real.learner import LATEST, LearnerConfig, load_learner, load_snapshots
from robo.twin import StandInConfig, perturbed, stand_in, stand_in_robot
from robo.twin.select import TwinGate

START = (0.2, -0.2, 1.1)
LEARNER = {"learning_starts": 20, "batch_size": 16, "sync_every": 10, "checkpoint_every": 20, "snapshot_every": 30}


@pytest.fixture
def env():
    with stand_in_robot(StandInConfig(robot=perturbed("crazyflie", 1.3, 1.0), initial_position=START)) as robot:
        yield RobotEnv(robot, RobotEnvConfig(max_steps=40, control_period=0.0))


@pytest.mark.slow  # spawns the learner (torch + SB3 import) three times: ~1 min on a quiet machine
def test_learner_survives_a_kill_and_resumes(env, tmp_path):
    """Kill the learner mid-run: the actor restarts it from its checkpoint, re-sends what came after,
    and at the end the checkpoint holds every real step; a second run resumes at the cap."""
    killed, pushes = [], []

    def on_step(step, learner):
        if step == 50 and not killed:
            killed.append(learner.process.pid)
            os.kill(learner.process.pid, signal.SIGKILL)
            learner.process.join()

    def intervene(obs, action):  # a "human" takes over every 7th call
        pushes.append(1)
        return np.full(4, 0.5) if len(pushes) % 7 == 0 else None

    cfg = FinetuneConfig(total_steps=90, learner=LEARNER)
    s = finetune(env, ResidualAdapter(load_raptor(), 0.2), tmp_path, cfg, reset=FlyBack(load_raptor(), START, 10),
                 intervention=intervene, on_step=on_step)
    assert killed and s["learner_restarts"] == 1
    assert s["steps"] == 90 and s["held"] == 90  # nothing lost across the kill
    assert s["interventions"] == 90 // 7
    model, held, demos = load_learner(tmp_path, LearnerConfig(**LEARNER))
    assert held == 90 and model.replay_buffer.size() == 90
    assert len(demos) == s["interventions"]  # interventions are flagged as demos
    # intervened actions are stored in the learner's space: (0.5 - base) / 0.2, clipped
    assert np.all(np.abs(model.replay_buffer.actions[demos[0], 0]) <= 1.0)
    # the step cap holds across runs: resuming at the cap flies no more steps
    again = finetune(env, ResidualAdapter(load_raptor(), 0.2), tmp_path, cfg)
    assert again["start_step"] == 90 and again["steps"] == 90 and again["episodes"] == 0
    assert (tmp_path / LATEST / "sb3.zip").exists() and not list(tmp_path.glob(".*tmp*"))
    assert sorted(load_snapshots(tmp_path, LearnerConfig(**LEARNER))) == ["000000030", "000000060", "000000090"]


def test_fly_back_calls_the_person_when_the_robot_cannot_arm():
    """After a tilt fault the robot lies outside the arming checks: FlyBack hands it to its fallback
    (here the stand-in's person, who puts it back), then flies it back; without one, arming fails."""
    with stand_in(StandInConfig(robot=perturbed("crazyflie", 1.3, 1.0), initial_position=START)) as lab:
        env = RobotEnv(lab.robot, RobotEnvConfig(max_steps=40, control_period=0.0))
        env.reset()
        tilted = (np.cos(np.radians(35)), np.sin(np.radians(35)), 0.0, 0.0)  # 70 deg of roll
        lab._vehicle.set_state(quaternion=tilted)
        for _ in range(10):  # the safety layer trips on the tilt once a measurement shows it
            if env.step(np.zeros(4))[2]:
                break
        assert lab.robot.fault is not None and lab.robot.fault.kind == "tilt"
        with pytest.raises(RobotError, match="arming refused"):
            FlyBack(load_raptor(), START, 10)(env)
        back = FlyBack(load_raptor(), START, 30, fallback=HumanPrompt(lambda message: lab.put_back(START)))
        back(env)
        assert back.fallbacks == 1
        obs, info = env.reset()  # armable again, near the start
        assert info["state"].position == pytest.approx(START, abs=0.1)


def test_an_actor_failure_stops_the_learner_and_returns(env, tmp_path):
    """A reset that raises ends ``finetune`` with that error at once; the learner process is gone
    (no exit hang on its queues) and its checkpoint folder is usable."""
    import multiprocessing as mp

    calls = []

    def failing_reset(e):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("reset controller lost the robot")

    with pytest.raises(RuntimeError, match="lost the robot"):
        finetune(env, ResidualAdapter(load_raptor(), 0.2), tmp_path, FinetuneConfig(total_steps=500, learner=LEARNER),
                 reset=failing_reset)
    assert not [p for p in mp.active_children() if p.name == "robo-learner"]


def test_twin_gate_holds_back_actors_the_twin_scores_worse(env, tmp_path):
    """With ``twin_gate`` the learner sends weights only when the twin admits them; every check is
    reported to the actor. A tolerance of -0 with a fresh (zero-residual) start: the first check sets
    the bar and only actors at least as good in the twin fly."""
    gate = TwinGate.config("raptor", perturbed("crazyflie", 1.3, 1.0), START, 0.2, 0.0, every=20, starts=4, steps=50)
    s = finetune(env, ResidualAdapter(load_raptor(), 0.2), tmp_path,
                 FinetuneConfig(total_steps=60, learner={**LEARNER, "twin_gate": gate}),
                 reset=HumanPrompt(lambda message: None))
    checks = s["gate"]
    assert [n for n, _, _ in checks] == [0, 20, 40, 60]
    assert checks[0][2] is True  # the starting actor sets the bar
    bar = checks[0][1]
    for n, score, admitted in checks[1:]:
        assert admitted == (score <= bar)
        bar = min(bar, score) if admitted else bar
    # the bar survives a restart: the resumed learner's actor must pass it, it does not set a new one
    assert json.loads((tmp_path / LATEST / "state.json").read_text())["gate_best"] == pytest.approx(bar)
    again = finetune(env, ResidualAdapter(load_raptor(), 0.2), tmp_path,
                     FinetuneConfig(total_steps=80, learner={**LEARNER, "twin_gate": gate}),
                     reset=HumanPrompt(lambda message: None))
    n, score, admitted = again["gate"][0]
    assert n == 60 and admitted == (score <= bar)


def test_human_prompt_reset_and_bad_config(env):
    prompts = []
    HumanPrompt(prompts.append)(env)
    assert prompts and "start point" in prompts[0]
    with pytest.raises(ValueError, match="total_steps"):
        FinetuneConfig(total_steps=0)
    with pytest.raises(ValueError, match="residual scale"):
        ResidualAdapter(load_raptor(), 0.0)
    with pytest.raises(ValueError, match="batch_size"):
        LearnerConfig(batch_size=0)


def test_finetune_cli_config_composes_and_rejects_a_bad_driver(tmp_path):
    """``robo finetune`` is registered, its config composes with the real_robot group, a bad driver errors."""
    import subprocess
    import sys

    from robo.commands.finetune import open_robot

    r = subprocess.run([sys.executable, "-m", "robo", "finetune", "base=raptor", "total_steps=10", "--cfg", "job"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "driver: px4" in r.stdout and "total_steps: 10" in r.stdout and "twin_pretrain:" in r.stdout
    with pytest.raises(ValueError, match="choose px4 or betaflight_sitl"):
        with open_robot({"driver": "crazyflie"}):
            pass
    r = subprocess.run([sys.executable, "-m", "robo", "finetune", "base=raptor", "twin_gate.tolerance=0.1",
                        f"hydra.run.dir={tmp_path}/run"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and "twin_gate.tolerance needs the twin" in r.stderr


@pytest.mark.slow  # two learner processes, identification and twin pre-training: ~1-2 min
def test_finetune_cli_with_twin_pretraining_identifies_deploys_and_resumes(tmp_path):
    """``robo finetune twin_pretrain.steps=N`` identifies the stand-in's mass, pre-trains in the twin,
    deploys the actor the twin scores best, and a resume keeps the identified robot."""
    import json
    import subprocess
    import sys

    args = [sys.executable, "-m", "robo", "finetune", "base=raptor", "residual_scale=0.5", "reset=prompt",
            "eval_episodes=1", "twin_pretrain.steps=2000", "twin_pretrain.snapshot_every=1000",
            "learner.snapshot_every=100", "twin_gate.tolerance=0.1", "twin_gate.every=100",
            f"hydra.run.dir={tmp_path}/run"]
    r = subprocess.run(args + ["total_steps=200"], cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert m["identified_mass"] == pytest.approx(0.03978, rel=0.05)  # the stand-in's hidden mass
    assert m["sim_steps"] == 2000 and m["deployed_actor"] in ("pretrained", "000000100", "000000200")
    assert m["gate_checks"] == 3 and m["gate_admitted"] >= 1  # at 0 (sets the bar), 100, 200 real steps
    identified = json.loads((tmp_path / "run" / "identified_robot.json").read_text())
    r = subprocess.run(args + ["total_steps=300", f"resume={tmp_path}/run"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert m["real_steps"] == 300 and "identified_mass" not in m  # no second identification on resume
    assert json.loads((tmp_path / "run" / "identified_robot.json").read_text()) == identified
