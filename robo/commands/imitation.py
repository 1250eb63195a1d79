"""``robo train policy=<imitation policy> task=<imitation task>``: behaviour cloning of a chunked
policy from demonstrations (or, with ``distill.teacher``, from a teacher policy's chunks on the
demonstrations' windows), with evaluation in the task's gymnasium env; resumable."""

from __future__ import annotations

import logging
from dataclasses import fields
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from robo.plots import plot_learning_curve
from robo.run_dir import start_run, write_json, write_resolved_config

from robo.imitation.data import ChunkWindows, compute_stats
from robo.imitation.distill import DistillConfig, teacher_labels
from robo.imitation.distributed import Ranks
from robo.imitation.evaluate import evaluate_chunked_policy, evaluate_flights, evaluate_per_task, flying_on
from robo.imitation.sources import init_weights, load_episodes, make_imitation_policy
from robo.imitation.trainer import ImitationTrainer, TrainConfig

log = logging.getLogger(__name__)
# what resume=<run> may change
RESUMABLE_CHANGES = {"threads", "policy.train.steps", "policy.train.keep_every", "task.eval.episodes", "video",
                     "device"}


def is_imitation(cfg: DictConfig) -> bool:
    return cfg.get("policy") is not None or cfg.task.get("kind") == "imitation"


def _check(cfg: DictConfig) -> None:
    if cfg.get("policy") is None:
        raise ValueError(f"task {cfg.task.name!r} is learned by imitation: choose a policy, e.g. policy=diffusion")
    if cfg.task.get("kind") != "imitation":
        raise ValueError(f"policy={cfg.policy.kind} is trained by imitation, but task {cfg.task.name!r} is an RL "
                         f"task; choose an imitation task (task=pusht or task=obstacle_reach)")


def evaluator(task: dict, episodes: int, video_dir: Path | None = None, video_name: str | None = None):
    """(policy, step) -> evaluation metrics in the task's env (``episodes`` episodes); the video of
    episode 0 goes to ``video_dir/video_name`` (default ``step_<step>.mp4``). A task with a ``flight``
    node (quadrotor_tracking) flies that batched quadrotor task instead (no video); one with ``eval.tasks``
    (metaworld_multitask) is evaluated on each of them in turn, ``episodes`` each (a video per task)."""
    e = task["eval"]
    if "flight" in task:
        return lambda policy, step: evaluate_flights(policy, task["flight"], task["robot"], episodes,
                                                     seed=int(e["seed"]), success_rmse=float(e["success_rmse"]))

    def evaluate(policy, step: int) -> dict:
        video = video_dir / (video_name or f"step_{step:07d}.mp4") if video_dir is not None else None
        kw = dict(seed=int(e["seed"]), num_envs=int(e.get("num_envs", 50)), max_steps=e.get("max_steps"),
                  video_path=video, env_kwargs=task.get("env_kwargs") or {})
        if e.get("tasks"):
            return evaluate_per_task(policy, task["env_id"], list(e["tasks"]), episodes, **kw)
        return evaluate_chunked_policy(policy, task["env_id"], episodes, **kw)
    return evaluate


def run(cfg: DictConfig, run_dir: Path) -> dict:
    cfg, run_dir = start_run(cfg, run_dir, RESUMABLE_CHANGES, "train")  # resume=<run>: the run's own config
    _check(cfg)
    c = OmegaConf.to_container(cfg, resolve=True)
    ranks = Ranks.from_env()  # under torchrun: rank 0 alone writes into the run folder
    if ranks.main:
        write_resolved_config(run_dir, cfg)
    task, pcfg = c["task"], c["policy"]
    episodes = load_episodes(task, c.get("dataset"), c.get("demos"), int(c["seed"]), c.get("extra_dataset"))
    image_shape = list(episodes[0]["image"].shape[1:]) if "image" in episodes[0] else None
    policy = make_imitation_policy(pcfg, episodes[0]["obs"].shape[-1], episodes[0]["action"].shape[-1], image_shape)
    policy.set_normalization(compute_stats(episodes))
    if c.get("init_from") and not cfg.resume:
        init_weights(policy, c["init_from"])  # its normalization too: the weights were trained with it
        log.info("weights and normalization initialized from %s", c["init_from"])
    log.info("%d demonstrations, %d frames; %s policy with %d parameters", len(episodes),
             sum(len(e["obs"]) for e in episodes), pcfg["kind"], sum(p.numel() for p in policy.model.parameters()))
    windows = ChunkWindows(episodes, policy.n_obs_steps, policy.horizon, policy.n_action_steps)
    known = {f.name for f in fields(TrainConfig)}
    train_cfg = TrainConfig(**{k: v for k, v in (pcfg.get("train") or {}).items() if k in known},
                            seed=int(c["seed"]))
    video = bool(c.get("video", {}).get("enabled", True)) if isinstance(c.get("video"), dict) else False
    distill = DistillConfig(**(c.get("distill") or {}))
    data = teacher_labels(distill.teacher, policy, windows, distill, run_dir) if distill.teacher else windows
    trainer = ImitationTrainer(policy, data, train_cfg, run_dir,
                               evaluate=evaluator(task, int(task["eval"]["episodes_during_training"])),
                               device=c.get("device", "auto"))
    trainer.train(resume=bool(cfg.resume))
    if not ranks.main:
        return {"step": trainer.step, "rank": ranks.rank}
    with flying_on(policy, trainer.device):  # the final evaluation on the run's device, as the periodic ones
        final = evaluator(task, int(task["eval"]["episodes"]), run_dir / "videos" if video else None)(policy,
                                                                                                     trainer.step)
    metrics = {"step": trainer.step, "train_wall_time": trainer.wall_time, "num_demos": len(episodes), **final}
    write_json(run_dir / "eval_history.json", trainer.history)
    write_json(run_dir / "metrics.json", metrics)
    plot_learning_curve(trainer.history, run_dir / "plots" / "learning_curve.png",
                        title=f"{pcfg['kind']} on {task['name']}")
    return {**{k: metrics[k] for k in ("step", "success_rate", "mean_max_reward", "rmse", "crash_rate",
                                       "train_wall_time", "episodes") if k in metrics},
            **{k: v for k, v in metrics.items() if k.startswith("success_rate/")}}   # per task (eval.tasks)
