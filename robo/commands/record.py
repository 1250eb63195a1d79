"""``robo record``: write a LeRobot v3.0 dataset of demonstrations, or convert an older one.

    robo record task=pusht episodes=200 out=data/pusht obs=state       # the scripted expert
    robo record task=pusht episodes=200 out=data/pusht_image obs=image [video=true]   # PNG frames [mp4 video]
    robo record task=figure_eight policy=raptor episodes=64 out=data/quad_fig8
    robo record task=metaworld task.name=reach-v3 episodes=10 out=data/mw_reach   # Meta-World's scripted expert
    robo record task=metaworld_multitask episodes=10 out=data/mw_mt   # 10 per task, one-hot task id in the state
    robo record task=pusht policy=checkpoint policy.path=<policy folder> episodes=1000 attempts=3 out=data/pusht_self
        # an imitation policy's own successes from 1000 starts (up to 3 tries each): self-imitation data
    robo record convert=data/pusht_v2 out=data/pusht_v3    # a LeRobot v2.0 / v2.1 dataset (robo's or LeRobot's)
"""

from __future__ import annotations

import logging
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from robo.datasets import convert_legacy
from robo.datasets.metaworld import record_metaworld, record_metaworld_multitask
from robo.datasets.record import record_pusht, record_pusht_rollouts, record_quadrotor
from robo.run_dir import seed_run, write_json, write_resolved_config

log = logging.getLogger(__name__)
QUADROTOR_TASKS = ("hover", "waypoint", "figure_eight")
PUSHT_TASKS = ("pusht", "pusht_matched", "gym_pusht")  # robo's MuJoCo push-T, the same matched to gym-pusht, gym-pusht


def run(cfg: DictConfig, run_dir: Path) -> dict:
    seed_run(int(cfg.seed), int(cfg.threads))
    write_resolved_config(run_dir, cfg)
    c = OmegaConf.to_container(cfg, resolve=True)
    out = Path(c["out"] or run_dir / "dataset")
    task, policy = c["task"], dict(c["policy"])
    kind = policy.pop("kind", None)
    common = dict(seed=int(c["seed"]), keep_failures=bool(c["keep_failures"]), overwrite=bool(c["overwrite"]))
    if c.get("convert"):
        if not Path(c["convert"]).is_dir():
            raise FileNotFoundError(f"convert={c['convert']}: no such dataset folder")
        result = convert_legacy(c["convert"], out, overwrite=common["overwrite"])
    elif task["name"] in PUSHT_TASKS:
        if kind == "checkpoint" and task["name"] == "gym_pusht":
            raise ValueError("gym-pusht episodes come from its adapted scripted expert (policy=expert)")
        if kind == "checkpoint":
            if c["obs"] != "state":
                raise ValueError("a push-T policy's rollouts are recorded with state observations only (obs=state)")
            result = record_pusht_rollouts(out, policy["path"], int(c["episodes"]), attempts=int(c["attempts"]),
                                           env=(task.get("env_kwargs") or {}).get("config"), **common)
        elif kind == "expert":
            result = record_pusht(out, int(c["episodes"]), obs=c["obs"], expert=policy, video=bool(c["video"]),
                                  sim=task["name"], **common)
        else:
            raise ValueError(f"policy={kind!r}: push-T episodes come from the scripted expert (policy=expert) or "
                             f"from an imitation policy (policy=checkpoint policy.path=<folder>)")
    elif task["name"] in QUADROTOR_TASKS:
        if kind == "expert":
            raise ValueError("the scripted expert flies push-T only; record quadrotors with policy=raptor "
                             "or policy=checkpoint policy.path=<folder>")
        result = record_quadrotor(out, task, c["robot"], int(c["episodes"]), c["seconds"],
                                  policy={"kind": kind, **policy}, sim=c["sim"], **common)
    elif task.get("suite") == "metaworld":   # task.name is the Meta-World env name, or task.names several
        if kind != "expert":
            raise ValueError("Meta-World episodes come from the package's scripted experts (policy=expert)")
        if task.get("names"):
            if c["obs"] != "state" or c["video"]:
                raise ValueError("multi-task Meta-World demos have state observations only (obs=state, no video)")
            result = record_metaworld_multitask(out, list(task["names"]), int(c["episodes"]), **common)
        else:
            view = {k: v for k, v in (task.get("env_kwargs") or {}).items() if k in ("camera", "image_size")}
            result = record_metaworld(out, task["name"], int(c["episodes"]), obs=c["obs"],
                                      video=bool(c["video"]), **view, **common)
    else:
        raise ValueError(f"task={task['name']!r}; choose one of {PUSHT_TASKS + QUADROTOR_TASKS} or metaworld")
    write_json(run_dir / "metrics.json", result)
    log.info("dataset written to %s", out)
    return result
