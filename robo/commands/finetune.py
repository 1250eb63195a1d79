"""``robo finetune real_robot=px4 base=raptor``: fine-tune on a (stand-in) real robot, write the run folder."""

from __future__ import annotations

import contextlib
import json
import logging
from dataclasses import replace
from pathlib import Path

import numpy as np
from omegaconf import DictConfig, OmegaConf

from hardware.drivers.px4 import PX4Robot
from hardware.export import c_exportable_kinds
from hardware.safety import SafetyConfig, SafetyLayer
from policies.base import Policy
from robo.evaluate import flown_policy, previous_action_convention, resolve_previous_action
from robo.factory import policy_by_name
from robo.foundation.teachers import robot_entry
from robo.real.finetune import FinetuneConfig, FlyBack, HumanPrompt, ResidualAdapter, finetune, fly_episode, \
    load_finetuned_actor
from robo.real.firmware import FirmwareLoop, run_rounds, truth_params
from robo.real.learner import LATEST, LearnerConfig, load_snapshots
from robo.real.robot_env import RobotEnv, RobotEnvConfig
from robo.validation import SHIPPED_POLICIES
from robo.run_dir import start_run, with_run_groups, write_json, write_resolved_config
from robo.twin.pretrain import TwinPretrainConfig, identify, pretrain_in_twin
from robo.twin.select import TwinGate, best_in_twin
from robo.twin.standin import StandInConfig, stand_in
from sims.envs.quadrotor_env import make_robot

log = logging.getLogger(__name__)
IDENTIFIED = "identified_robot.json"  # the twin's calibrated robot (preset, mass, thrust curve), kept for resumes
# what resume=<run> may change: how long, how the robot is reached and reset, how many evaluation episodes
RESUMABLE_CHANGES = {"total_steps", "threads", "eval_episodes", "reset", "reset_steps", "real_robot.connection",
                     "real_robot.signing_key_file", "device"}
rewrite_overrides = with_run_groups  # resume=<run>: compose with the run's own config groups


@contextlib.contextmanager
def open_robot(c: dict):
    """(robot, person) for a ``real_robot`` config node: the robot connected and behind the safety
    layer, and the human reset (``HumanPrompt``: at the terminal for a real PX4; the stand-in's
    ``put_back`` at its initial position for the stand-in)."""
    if c.get("driver") != "px4":
        raise ValueError(f"real_robot.driver={c.get('driver')!r}; choose px4 or betaflight_sitl")
    if c.get("connection"):
        # the key comes from a file the config names, or $ROBO_MAVLINK_KEY: never from the (saved) config itself
        driver = PX4Robot(connection=c["connection"], signing_key_file=c.get("signing_key_file"))
        robot = SafetyLayer(driver, SafetyConfig.from_dict(c.get("safety") or {}))
        robot.connect(10.0)
        try:
            yield robot, HumanPrompt()
        finally:
            robot.close()
        return
    s = c["standin"]
    start = tuple(s["initial_position"])
    with stand_in(StandInConfig(robot=s["robot"], sensors=s.get("sensors") or {}, initial_position=start,
                                safety=c.get("safety") or {}, signing_key_file=c.get("signing_key_file"))) as lab:
        yield lab.robot, HumanPrompt(lambda message: lab.put_back(start))


def run(cfg: DictConfig, run_dir: Path) -> dict:
    cfg, run_dir = start_run(cfg, run_dir, RESUMABLE_CHANGES, "finetune")  # resume=<run>: its config and learner
    c = OmegaConf.to_container(cfg, resolve=True)
    c["learner"].setdefault("device", c.get("device", "cpu"))  # the learner's SAC trains on the run's device
    if c["real_robot"].get("driver") == "betaflight_sitl":
        write_resolved_config(run_dir, cfg)
        return run_in_firmware(c, run_dir)
    if c["reset"] not in ("fly_back", "prompt"):
        raise ValueError(f"reset={c['reset']!r}; choose fly_back or prompt")
    write_resolved_config(run_dir, cfg)
    start = tuple(c["real_robot"].get("standin", {}).get("initial_position", c["hover_position"]))
    gate = c["twin_gate"]
    if gate["tolerance"] is not None and int(c["twin_pretrain"]["steps"]) <= 0:
        raise ValueError("twin_gate.tolerance needs the twin: set twin_pretrain.steps > 0 (it identifies the robot)")
    # the residual's base clips its output: the residual corrects the command the robot applies, as the twin's
    # pre-training, snapshot scoring and gate (robo.twin) see it; the adapter's action, which the observation
    # reports, is clipped either way. Flown alone (fly-back, identification) RAPTOR gives its raw output.
    base = policy_by_name(c["base"])
    with open_robot(c["real_robot"]) as (robot, person):
        env = RobotEnv(robot, robot_env_config(c, base))
        adapter = ResidualAdapter(base, float(c["residual_scale"]))
        fly_back = c["reset"] == "fly_back"
        reset = FlyBack(flown_policy(c["base"], env.config.previous_action), start, int(c["reset_steps"]),
                        person) if fly_back else person
        def evaluate(actor=None) -> list[dict]:  # each episode after the reset controller: comparable starts
            out = []
            for i in range(int(c["eval_episodes"])):
                reset(env)
                out.append(fly_episode(env, adapter, actor, seed=i))
            return out

        before = evaluate()
        pre, lc, folder = c["twin_pretrain"], LearnerConfig(**c["learner"]), run_dir / "checkpoints"
        pretrained, params, identified = {}, None, run_dir / IDENTIFIED
        if int(pre["steps"]) > 0 and not (folder / LATEST).exists():
            params = _pretrain(env, reset, adapter.base, folder, c, start)
            write_json(identified, robot_entry(params, pre["nominal"]))
            pretrained_actor = load_finetuned_actor(folder, lc)
            pretrained = {"identified_mass": params.mass, "sim_steps": int(pre["steps"]),
                          "tracking_error_pretrained": float(np.mean([r["mean_error"] for r in
                                                                      evaluate(pretrained_actor)]))}
        if identified.exists():  # the reward's hover command and the first observation's action from the twin
            entry = json.loads(identified.read_text())
            env = RobotEnv(robot, replace(env.config, robot=entry))
            if gate["tolerance"] is not None:
                c["learner"]["twin_gate"] = TwinGate.config(c["base"], entry, start, c["residual_scale"],
                                                            gate["tolerance"], hover=tuple(c["hover_position"]),
                                                            every=int(gate["every"]))
        summary = finetune(env, adapter, folder,
                           FinetuneConfig(total_steps=int(c["total_steps"]), residual_scale=float(c["residual_scale"]),
                                          seed=int(c["seed"]), learner=dict(c["learner"])), reset=reset)
        actor = load_finetuned_actor(folder, lc)
        if pretrained and lc.snapshot_every > 0:  # deploy the actor the twin scores best (Real-is-Sim)
            candidates = {"pretrained": pretrained_actor, **{k: v for k, v in load_snapshots(folder, lc).items()
                                                            if not k.startswith("sim-")}}
            best, scores = best_in_twin(adapter.base, candidates, params, start, float(c["residual_scale"]),
                                        hover=tuple(c["hover_position"]))
            actor, pretrained["deployed_actor"] = candidates[best], best
            log.info("twin scores of the robot phase's actors: %s; deploying %s", scores, best)
        after = evaluate(actor)
        events = [e.kind for e in robot.events if e.is_fault and e.kind != "stop"]
    result = {"real_steps": summary["steps"], "episodes": summary["episodes"],
              "tracking_error_before": float(np.mean([b["mean_error"] for b in before])),
              "tracking_error_after": float(np.mean([a["mean_error"] for a in after])),
              "final_error_before": float(np.mean([b["final_error"] for b in before])),
              "final_error_after": float(np.mean([a["final_error"] for a in after])),
              "interventions": summary["interventions"], "learner_restarts": summary["learner_restarts"],
              "safety_faults": len(events),
              "gate_checks": len(summary["gate"]), "gate_admitted": sum(a for _, _, a in summary["gate"])}
    result.update(pretrained)
    write_json(run_dir / "metrics.json", result)
    return result


def robot_env_config(c: dict, base: Policy) -> RobotEnvConfig:
    """The fine-tuning episodes' ``RobotEnvConfig`` (a ``robo finetune`` config ``c``): the previous action
    ``base`` expects (``robo.evaluate.previous_action_convention``: L2F's ``raw_motor_state`` for RAPTOR and robo's
    foundation GRUs), kept by the fly-back, the identification flight and the env rebuilt with the identified
    robot, all of which derive their configs from this one."""
    return RobotEnvConfig(hover_position=tuple(c["hover_position"]), max_steps=int(c["episode_steps"]),
                          control_period=0.0, previous_action=previous_action_convention(base))


def twin_task(task: str | dict, base: Policy) -> dict:
    """``twin_pretrain.task`` with the previous action ``base`` expects where it says ``auto`` (or nothing), so the
    residual learns in the twin on the observations it gets on the robot (``robot_env_config``)."""
    t = {"name": task} if isinstance(task, str) else dict(task)
    return {**t, "previous_action": resolve_previous_action(t.get("previous_action", "auto"), base)}


def _pretrain(env: RobotEnv, reset, base, directory: Path, c: dict, start):
    """Identify the robot with the twin (one dithered flight), pre-train the learner in the calibrated
    twin into ``directory`` (fine-tuning resumes from it; with ``twin_pretrain.select`` from the
    snapshot the twin scores best from ``start``); returns the identified parameters."""
    pre = c["twin_pretrain"]
    reset(env)
    pilot = flown_policy(pre["identify_policy"])  # flown alone, in its own convention: RAPTOR's raw output
    pilot_env = RobotEnv(env.safety, replace(env.config, previous_action=previous_action_convention(pilot)))
    twin, flight = identify(pilot_env, pilot, pre["nominal"], int(pre["identify_steps"]), seed=int(c["seed"]))
    return _pretrain_identified(twin, base, directory, c, start, env.safety.config)


def _pretrain_identified(twin, base, directory: Path, c: dict, start, safety: SafetyConfig):
    """Pre-train the learner in ``twin``'s calibrated model (after the identification flight) into ``directory``;
    returns the identified parameters."""
    pre = c["twin_pretrain"]
    params = twin.calibrated_params()
    log.info("identified mass %.5f kg, thrust scale %.3f in %d real steps", params.mass,
             twin.estimate["thrust_scale"], int(pre["identify_steps"]))
    cfg = TwinPretrainConfig(steps=int(pre["steps"]), residual_scale=float(c["residual_scale"]),
                             task=twin_task(pre["task"], base),
                             learning_rate=pre.get("learning_rate"), seed=int(c["seed"]),
                             snapshot_every=int(pre["snapshot_every"]), select_start=start if pre["select"] else None,
                             select_hover=tuple(c["hover_position"]))
    out = pretrain_in_twin(base, params, directory, cfg, LearnerConfig(**c["learner"]), safety)
    log.info("pre-trained in the twin: %d sim steps in %.0f s", out["steps"], out["wall_s"])
    return params


def run_in_firmware(c: dict, run_dir: Path) -> dict:
    """``real_robot=betaflight_sitl``: the same loop with every actor flown inside Betaflight's firmware
    (``robo.real.firmware``): hand-placed starts around ``real_robot.initial_position`` (the SITL runner holds the
    vehicle there until the motors spin: ``reset`` and ``reset_steps`` are not read), the identification flight's
    log replayed through the twin, rounds of exploration builds, deterministic builds before and after."""
    rr, pre, gate = c["real_robot"], c["twin_pretrain"], c["twin_gate"]
    if int(rr["round_steps"]) < 1 or not float(rr["loop_hz"]) > 0 or float(rr["start_jitter"]) < 0:
        raise ValueError(f"real_robot: round_steps={rr['round_steps']} must be >= 1, loop_hz={rr['loop_hz']} > 0 and "
                         f"start_jitter={rr['start_jitter']} >= 0")
    if gate["tolerance"] is not None and int(pre["steps"]) <= 0:
        raise ValueError("twin_gate.tolerance needs the twin: set twin_pretrain.steps > 0 (it identifies the robot)")
    base, scale, seed = policy_by_name(c["base"]), float(c["residual_scale"]), int(c["seed"])
    if base.kind not in c_exportable_kinds():
        raise ValueError(f"base={c['base']} is a {base.kind!r} policy: inside the firmware the base runs as C beside "
                         f"the residual, which robo exports for {c_exportable_kinds()} bases")
    start, jitter = np.asarray(rr["initial_position"], dtype=np.float64), float(rr["start_jitter"])
    hover = tuple(float(v) for v in c["hover_position"])
    nominal = make_robot(pre["nominal"])
    loop = FirmwareLoop(base, None if c["base"] in SHIPPED_POLICIES else c["base"], scale, truth_params(rr), nominal,
                        float(nominal.hover_action), hover, SafetyConfig.from_dict(rr.get("safety") or {}), run_dir)

    def starts(i: int, stream: int = 1) -> np.ndarray:  # hand placement: start +- jitter per axis, drawn per flight
        return start + np.random.default_rng([seed, stream, i]).uniform(-jitter, jitter, 3)

    steps, n_eval = int(c["episode_steps"]), int(c["eval_episodes"])
    eval_starts = np.stack([starts(i, 0) for i in range(n_eval)])
    before = loop.evaluate(None, "before", eval_starts, steps)
    lc, folder = LearnerConfig(**c["learner"]), run_dir / "checkpoints"
    pretrained, params, identified = {}, None, run_dir / IDENTIFIED
    if int(pre["steps"]) > 0 and not (folder / LATEST).exists():
        pilot = pre["identify_policy"]
        twin = loop.identify(policy_by_name(pilot), None if pilot in SHIPPED_POLICIES else pilot, pre["nominal"],
                             start, int(pre["identify_steps"]), seed)
        params = _pretrain_identified(twin, base, folder, c, tuple(start), loop.safety)
        write_json(identified, robot_entry(params, pre["nominal"]))
        pretrained_actor = load_finetuned_actor(folder, lc)
        pretrained = {"identified_mass": params.mass, "sim_steps": int(pre["steps"]),
                      "tracking_error_pretrained": float(np.mean([r["mean_error"] for r in loop.evaluate(
                          pretrained_actor, "pretrained", eval_starts, steps)]))}
    if identified.exists():
        entry = json.loads(identified.read_text())
        loop.hover_action = float(make_robot(entry).hover_action)  # the reward's hover command: the twin's
        if params is None:
            params = make_robot(entry)
        if gate["tolerance"] is not None:
            c["learner"]["twin_gate"] = TwinGate.config(c["base"], entry, tuple(start), scale, gate["tolerance"],
                                                        hover=hover, every=int(gate["every"]))
    config = FinetuneConfig(total_steps=int(c["total_steps"]), residual_scale=scale, seed=seed, learner=dict(c["learner"]))
    summary = run_rounds(loop, folder, config, starts, steps, int(rr["round_steps"]))
    actor = load_finetuned_actor(folder, lc)
    if pretrained and lc.snapshot_every > 0:  # deploy the actor the twin scores best (Real-is-Sim)
        candidates = {"pretrained": pretrained_actor, **{k: v for k, v in load_snapshots(folder, lc).items()
                                                        if not k.startswith("sim-")}}
        best, scores = best_in_twin(base, candidates, params, tuple(start), scale, hover=hover)
        actor, pretrained["deployed_actor"] = candidates[best], best
        log.info("twin scores of the robot phase's actors: %s; deploying %s", scores, best)
    after = loop.evaluate(actor, "after", eval_starts, steps)
    faults = summary["safety_faults"] + sum(r["faults"] for r in before + after)
    result = {"robot": "betaflight_sitl", "real_steps": summary["steps"], "episodes": summary["episodes"],
              "rounds": summary["rounds"], "build_s": summary["build_s"], "flight_s": summary["flight_s"],
              "tracking_error_before": float(np.mean([b["mean_error"] for b in before])),
              "tracking_error_after": float(np.mean([a["mean_error"] for a in after])),
              "final_error_before": float(np.mean([b["final_error"] for b in before])),
              "final_error_after": float(np.mean([a["final_error"] for a in after])),
              "interventions": 0, "learner_restarts": summary["learner_restarts"], "safety_faults": faults,
              "gate_checks": len(summary["gate"]), "gate_admitted": sum(a for _, _, a in summary["gate"])}
    result.update(pretrained)
    write_json(run_dir / "metrics.json", result)
    return result
