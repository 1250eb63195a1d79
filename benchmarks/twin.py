"""Digital twin and real-robot fine-tuning on the stand-in real robot (one table).

The "real robot" is a simulated PX4 vehicle with hidden parameters (a crazyflie 30 % heavier, thrust
scale 1.1), sensor noise and latency, reached only through PX4Robot over loopback UDP (lockstep).
Every setting is a Hydra override of ``configs/finetune.yaml`` (as for ``robo finetune``), applied after this
benchmark's defaults (``BENCH_DEFAULTS``).

1. Parameter identification: RAPTOR (``twin_pretrain.identify_policy``, + 0.05 action dither for excitation)
   flies the robot twin-in-the-loop for ``twin_pretrain.identify_steps`` ticks (10 s), with
   ``real_robot.standin.sensors.latency_steps`` ticks of latency; the twin's mass, thrust scale and latency
   against the hidden truth.
2. Twin-vs-real correlation: a quality ladder of 8 RAPTOR variants (collective bias -0.10 .. +0.25)
   flown on the robot for ``episode_steps`` ticks and scored in the calibrated twin (all 8 at once, batched)
   and in the uncalibrated (nominal) twin; Pearson correlation of the mean hover error.
3. Fine-tuning (``--finetune``): a SAC residual (``residual_scale``, ``learner.*``) on a base policy (``base``:
   ``raptor`` or a checkpoint folder, e.g. the ``make run`` policy trained on the nominal Crazyflie) on a
   Crazyflie 30 % heavier (thrust nominal) for ``total_steps`` real steps, learner in another process; resets
   by hand at START +- 0.1 m (``reset=prompt``) or flown back by RAPTOR (``reset=fly_back``).
   ``twin_pretrain.steps=N`` first identifies the robot and pre-trains the learner for N steps in the calibrated
   twin (continuing from the snapshot the twin scores best); ``twin_gate.tolerance`` lets only actors the twin
   scores within that fraction of the best fly. Tracking error over ``eval_episodes`` episodes of base /
   twin-pretrained / fine-tuned (last) / fine-tuned (the robot phase's snapshot the twin scores best) from the
   same hand-placed starts, real steps, safety faults.

    nice -n 10 .venv/bin/python benchmarks/twin.py
    nice -n 10 .venv/bin/python benchmarks/twin.py --skip-twin --finetune total_steps=5000 twin_pretrain.steps=60000 \
        residual_scale=0.5 learner.learning_rate=0.0001 learner.gradient_steps=1 base=<nominal policy folder>
"""

from __future__ import annotations

import tempfile
from dataclasses import asdict, replace
import time
from pathlib import Path

import numpy as np
import torch
from omegaconf import OmegaConf

from common import command_config, fail, parse, parser  # benchmarks/ is on sys.path when run as a script
from policies.foundation import load_raptor
from robo.factory import policy_by_name
from robo.foundation.teachers import robot_entry
from robo.real import RobotEnv, RobotEnvConfig
from robo.real.finetune import (FinetuneConfig, FlyBack, HumanPrompt, ResidualAdapter, finetune, fly_episode,
                               load_finetuned_actor)
from robo.real.learner import LearnerConfig, load_snapshots
from robo.twin import StandInConfig, evaluate_in_twin, hover_scores, perturbed, stand_in, stand_in_robot
from robo.twin.pretrain import TwinPretrainConfig, identify, pretrain_in_twin
from robo.twin.select import TwinGate, best_in_twin
from sims.twin import DigitalTwin

START = (0.2, -0.2, 1.1)
MASS_SCALE, THRUST_SCALE = 1.3, 1.1
NOISE = {"position_noise": 0.005, "velocity_noise": 0.01, "attitude_noise": 0.005, "angular_velocity_noise": 0.01}
JITTER = 0.1  # m, spread of hand-placed starts around START (per axis)
BIASES = (-0.10, -0.05, 0.0, 0.05, 0.10, 0.15, 0.20, 0.25)
# Overrides of configs/finetune.yaml applied before the command line's: hand resets, 10 evaluation episodes,
# the learner at 4 updates per transition with actor snapshots for the twin to score, 2 ticks of sensor latency.
BENCH_DEFAULTS = ["reset=prompt", "reset_steps=300", "eval_episodes=10", "learner.gradient_steps=4",
                  "learner.sync_every=25", "learner.snapshot_every=500", "real_robot.standin.sensors.latency_steps=2"]
RESETS = ("prompt", "fly_back")


class Perturbed:
    """RAPTOR with a collective bias (a cheap quality ladder)."""

    def __init__(self, bias: float = 0.0):
        self.base, self.bias = load_raptor(), bias
        self.obs_dim, self.action_dim = 22, 4

    def reset(self, mask=None):
        self.base.reset(mask)

    def act(self, obs):
        a = (torch.as_tensor(self.base.act(torch.as_tensor(obs, dtype=torch.float32))) + self.bias).clamp(-1, 1)
        return a.numpy() if isinstance(obs, np.ndarray) else a


def identification(steps: int, latency: int, pilot: str = "raptor") -> tuple[DigitalTwin, dict]:
    truth = perturbed("crazyflie", MASS_SCALE, THRUST_SCALE)
    cfg = StandInConfig(robot=truth, initial_position=START, sensors={**NOISE, "latency_steps": latency})
    t0 = time.monotonic()
    with stand_in_robot(cfg) as robot:
        env = RobotEnv(robot, RobotEnvConfig(control_period=0.0))
        twin, flight = identify(env, policy_by_name(pilot), "crazyflie", steps)
    a = flight.arrays()
    return twin, {"ticks": len(a["mass"]), "mass": a["mass"][-1], "true_mass": truth["mass"],
                  "thrust_scale": a["thrust_scale"][-1], "latency": a["latency_steps"][-1],
                  "pred_err": a["prediction_error"][-1], "faults": [e for e in flight.safety_events if e != "stop"],
                  "wall": time.monotonic() - t0}


def real_scores(steps: int) -> np.ndarray:
    cfg = StandInConfig(robot=perturbed("crazyflie", MASS_SCALE, THRUST_SCALE), initial_position=START,
                        sensors=NOISE)
    out = []
    for b in BIASES:
        with stand_in_robot(cfg) as robot:  # a fresh robot at the same start for each checkpoint
            env = RobotEnv(robot, RobotEnvConfig(max_steps=steps, control_period=0.0))
            policy, (obs, info) = Perturbed(bias=b), env.reset(seed=0)
            policy.reset()
            errors = [info["position_error"]]
            for _ in range(steps):
                obs, _, term, trunc, info = env.step(policy.act(obs[None])[0])
                errors.append(info["position_error"])
                if term or trunc:
                    break
            out.append(np.mean(errors) if not term else np.inf)
    return np.asarray(out)


def pearson(a, b) -> float:
    a, b = np.asarray(a, float), np.asarray(b, float)
    ok = np.isfinite(a) & np.isfinite(b)
    return float(np.corrcoef(a[ok], b[ok])[0, 1])


def main() -> None:
    ap = parser(__doc__, "finetune", "total_steps=5000 twin_pretrain.steps=60000 learner.learning_rate=0.0001 seed=1")
    ap.add_argument("--skip-twin", action="store_true", help="only the fine-tuning rows")
    ap.add_argument("--finetune", action="store_true", help="also fine-tune on the robot (total_steps real steps)")
    args = parse(ap)
    cfg = command_config(ap, "finetune", args.overrides, defaults=BENCH_DEFAULTS)
    if cfg.reset not in RESETS:
        fail(ap, f"reset={cfg.reset}: choose one of {', '.join(RESETS)}")
    if args.skip_twin and not args.finetune:
        fail(ap, "--skip-twin leaves nothing to measure: add --finetune")
    c = OmegaConf.to_container(cfg, resolve=True)
    torch.set_num_threads(int(c["threads"]))
    rows = [] if args.skip_twin else twin_rows(c)
    if args.finetune:
        rows += run_finetune(c)
    w = max(len(r[0]) for r in rows)
    v = max(len(r[1]) for r in rows)
    print(f"{'measure':<{w}}  {'value':<{v}}  note\n" + "-" * (w + v + 40))
    for r in rows:
        print(f"{r[0]:<{w}}  {r[1]:<{v}}  {r[2]}")


def twin_rows(c: dict) -> list[tuple[str, str, str]]:
    """Identification and twin-vs-real correlation rows; ``c`` is the resolved finetune config."""
    rows, tp, steps = [], c["twin_pretrain"], int(c["episode_steps"])
    latency = int(c["real_robot"]["standin"]["sensors"]["latency_steps"])
    twin, ident = identification(int(tp["identify_steps"]), latency, tp["identify_policy"])
    rows += [("id: flight", f"{ident['ticks'] / 100:.1f} s", "twin-in-the-loop, dither 0.05"),
             ("id: mass", f"{ident['mass']:.5f} kg", f"true {ident['true_mass']:.5f}, error "
              f"{100 * abs(ident['mass'] / ident['true_mass'] - 1):.2f} %"),
             ("id: thrust scale", f"{ident['thrust_scale']:.4f}",
              f"true {THRUST_SCALE}, error {100 * abs(ident['thrust_scale'] / THRUST_SCALE - 1):.2f} %"),
             ("id: latency", f"{ident['latency']} ticks", f"true {latency}"),
             ("id: prediction RMS", f"{ident['pred_err'][0]:.4f} m / {ident['pred_err'][1]:.4f} m/s",
              f"faults {ident['faults']}, wall {ident['wall']:.0f} s")]
    t0 = time.monotonic()
    real = real_scores(steps)
    t_real = time.monotonic() - t0
    policies = [Perturbed(bias=b) for b in BIASES]
    t0 = time.monotonic()
    cal = hover_scores(evaluate_in_twin(policies, twin.calibrated_params(), START, steps=steps)[:, :, 0])
    t_twin = time.monotonic() - t0
    nom = hover_scores(evaluate_in_twin(policies, "crazyflie", START, steps=steps)[:, :, 0])
    rows += [("corr: real mean error", " ".join(f"{x:.3f}" for x in real),
              f"{len(BIASES)} checkpoints, {t_real:.0f} s"),
             ("corr: calibrated twin", " ".join(f"{x:.3f}" for x in cal["mean_error"]), f"all at once, {t_twin:.1f} s"),
             ("corr: uncalibrated twin", " ".join(f"{x:.3f}" for x in nom["mean_error"]), ""),
             ("corr: Pearson calibrated", f"{pearson(cal['mean_error'], real):.3f}", "target >= 0.9"),
             ("corr: Pearson uncalibrated", f"{pearson(nom['mean_error'], real):.3f}", "")]
    return rows


def run_finetune(c: dict) -> list[tuple[str, str, str]]:
    """Fine-tuning rows; ``c`` is the resolved finetune config."""
    base, episodes, seed = c["base"], int(c["eval_episodes"]), int(c["seed"])
    residual_scale = float(c["residual_scale"])
    twin_steps, gate = int(c["twin_pretrain"]["steps"]), c["twin_gate"]["tolerance"]
    learner = LearnerConfig(**{**c["learner"], "seed": seed})
    cfg = StandInConfig(robot=perturbed("crazyflie", MASS_SCALE, 1.0), initial_position=START)
    t0 = time.monotonic()
    rows, actors = [], {"base": None}
    with stand_in(cfg) as lab, tempfile.TemporaryDirectory() as d:
        robot = lab.robot
        env = RobotEnv(robot, RobotEnvConfig(max_steps=int(c["episode_steps"]), control_period=0.0))
        policy = policy_by_name(base)
        rng = np.random.default_rng(seed)
        jittered = lambda: np.asarray(START) + rng.uniform(-JITTER, JITTER, 3)  # noqa: E731
        person = HumanPrompt(lambda message: lab.put_back(jittered()))
        # by hand: the person puts the robot back every episode; fly_back: RAPTOR flies it back (the person
        # only after a crash, when it cannot arm)
        reset = person if c["reset"] == "prompt" else FlyBack(load_raptor(), START, int(c["reset_steps"]), person)
        adapter = ResidualAdapter(policy, residual_scale)
        if twin_steps:
            pre_rows, identified = pretrain_rows(lab, policy, d, c["twin_pretrain"], residual_scale, learner, seed)
            rows += pre_rows
            actors["twin-pretrained"] = load_finetuned_actor(d, learner)
            # the reward's hover command (and the first observation's action) from the identified robot
            env = RobotEnv(robot, replace(env.config, robot=robot_entry(identified, "crazyflie")))
            if gate is not None:
                twin_gate = TwinGate.config(base, robot_entry(identified, "crazyflie"), START, residual_scale, gate,
                                            every=c["twin_gate"]["every"])
                learner = replace(learner, twin_gate=twin_gate)
        ft = FinetuneConfig(total_steps=int(c["total_steps"]), residual_scale=residual_scale, seed=seed,
                            learner=asdict(learner))
        s = finetune(env, adapter, d, ft, reset=reset)
        train_faults, train_wall = _faults(robot), time.monotonic() - t0
        if s["gate"]:
            rows.append(("ft: twin gate", f"{sum(a for _, _, a in s['gate'])} of {len(s['gate'])} admitted",
                         " ".join(f"{n}:{x:.3f}{'' if a else 'x'}" for n, x, a in s["gate"])))
        put_back = reset.fallbacks if isinstance(reset, FlyBack) else s["episodes"]
        actors["fine-tuned, last"] = load_finetuned_actor(d, learner)
        if twin_steps:  # Real-is-Sim: score the pre-trained actor and the robot phase's snapshots in the twin
            candidates = {"twin-pretrained": actors["twin-pretrained"],
                          **{k: v for k, v in load_snapshots(Path(d), learner).items() if not k.startswith("sim-")}}
            best, scores = best_in_twin(policy, candidates, identified, START, residual_scale)
            rows.append(("ft: twin's pick among the robot phase's actors", best,
                         " ".join(f"{k}:{v:.3f}" for k, v in scores.items())))
            actors["fine-tuned, twin-selected"] = candidates[best]
        runs = {name: [] for name in actors}
        starts = np.asarray(START) + np.random.default_rng(1).uniform(-JITTER, JITTER, (episodes, 3))
        for start in starts:  # every policy from the same hand-placed starts
            for name, actor in actors.items():
                lab.put_back(start)
                runs[name].append(fly_episode(env, adapter, actor))
    for name, r in runs.items():
        mean = [x["mean_error"] for x in r]
        rows.append((f"ft: tracking error, {name}", f"{np.mean(mean):.4f} m +- {np.std(mean):.4f}",
                     f"final {np.mean([x['final_error'] for x in r]):.4f} m, faults/episode "
                     f"{np.mean([x['faults'] for x in r]):.2f}, {episodes} episodes of 2 s"
                     + (f", base {base}" if name == "base" else "")))
    return rows + [("ft: real fine-tuning steps", f"{s['steps']}", f"{s['episodes']} episodes, {train_wall:.0f} s wall "
                    f"(all real steps, with identification and resets)"),
                   ("ft: safety faults in fine-tuning", f"{len(train_faults)}",
                    f"{train_faults[:4]}..., {s['safety_faults']} episodes ended by one; put back by hand "
                    f"{put_back} times")]


def pretrain_rows(lab, policy, directory, tp: dict, residual_scale, learner, seed) -> list:
    """Identify the robot with the twin (``tp["identify_policy"]`` + dither, twin-in-the-loop), then pre-train the
    residual learner in the calibrated twin (``tp``: the config's ``twin_pretrain``); the fine-tuning run resumes
    from ``directory``."""
    lab.put_back(START)
    env = RobotEnv(lab.robot, RobotEnvConfig(control_period=0.0))
    id_steps, twin_steps = int(tp["identify_steps"]), int(tp["steps"])
    params = identify(env, policy_by_name(tp["identify_policy"]), tp["nominal"], id_steps)[0].calibrated_params()
    c = TwinPretrainConfig(steps=twin_steps, residual_scale=residual_scale, task=tp["task"],
                           learning_rate=float(tp["learning_rate"]), snapshot_every=int(tp["snapshot_every"]),
                           select_start=START if tp["select"] else None, seed=seed)
    pre = pretrain_in_twin(policy, params, directory, c, learner, lab.robot.config)
    scores = " ".join(f"{v:.3f}" for v in pre["scores"].values())
    return [("ft: identified mass", f"{params.mass * 1000:.2f} g",
             f"true {perturbed('crazyflie', MASS_SCALE, 1.0)['mass'] * 1000:.2f} g, {id_steps} real steps"),
            ("ft: twin pre-training", f"{pre['steps']} sim steps",
             f"{pre['wall_s']:.0f} s wall, 0 real steps, kept {pre['selected']} (twin scores {scores})")], params


def _faults(robot) -> list[str]:
    return [e.kind for e in robot.events if e.is_fault and e.kind != "stop"]


if __name__ == "__main__":
    main()
