"""``robo eval``: fly a policy in the batched sim, score it, write the run folder; on an imitation
task (``task=pusht policy=checkpoint policy.path=<dir>``), run the checkpoint's episodes in the
task's gymnasium env instead (the policy on ``device``, the envs on the CPU)."""

from __future__ import annotations

import logging
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from policies.chunked import ChunkedPolicy
from robo.evaluate import flight_device, flight_metrics, flown_policy, resolve_previous_action, rollout
from robo.factory import make_policy, make_task
from robo.media import write_flight_media
from robo.run_dir import seed_run, write_json, write_resolved_config

log = logging.getLogger(__name__)


def run(cfg: DictConfig, run_dir: Path) -> dict:
    seed_run(int(cfg.seed), int(cfg.threads))
    write_resolved_config(run_dir, cfg)
    c = OmegaConf.to_container(cfg, resolve=True)
    if c["task"].get("kind") == "imitation":
        return evaluate_imitation(c, run_dir)
    requested = c["task"].get("previous_action", "auto")
    # RAPTOR gives its raw output where the flight feeds it L2F's previous action (flown_policy)
    policy = flown_policy("raptor", requested, c["policy"].get("path")) if c["policy"]["kind"] == "raptor" \
        else make_policy(c["policy"])
    # task.previous_action: auto flies a RAPTOR-compatible policy the way L2F fed RAPTOR (raw_motor_state)
    previous_action = resolve_previous_action(requested, policy)
    device = flight_device(c.get("device", "auto"), policy, c["sim"])
    task = make_task({**c["task"], "previous_action": previous_action}, c["robot"], c["sim"], int(cfg.num_envs),
                     seed=int(cfg.seed), device=device)
    check_observation(policy, task, c["policy"].get("path"))
    check_export(policy, task)
    policy.save(run_dir / "checkpoints" / "policy")  # after the task is built: a bad robot leaves no folder
    log.info("flying %s on %d x %s, task %s, %.1f s, on %s, previous action %s", c["policy"]["kind"], cfg.num_envs,
             c["robot"]["preset"], c["task"]["name"], cfg.seconds, device, previous_action)
    r = rollout(policy, task, float(cfg.seconds), progress=True)
    metrics = flight_metrics(r, float(cfg.success_radius))
    metrics.update(task=c["task"]["name"], robot=c["robot"]["preset"], policy=c["policy"]["kind"], device=str(device),
                   previous_action=previous_action)
    write_json(run_dir / "metrics.json", metrics)
    write_flight_media(run_dir, task, r, f"{c['task']['name']}: {c['policy']['kind']} on {c['robot']['preset']}",
                       int(cfg.plot_envs), c["video"])
    log.info("run folder: %s", run_dir)
    for k, v in metrics.items():
        log.info("%-30s %s", k, v)
    return metrics


def check_observation(policy, task, path: str | None) -> None:
    """One line when ``policy`` reads another observation length than ``task`` builds (an actor trained with
    ``task.action_history``, or an old one that read ``task.position_integral``), naming the overrides of its
    training run (``<run>/config.yaml`` above a ``<run>/checkpoints/*/policy`` folder) when it can read them. An
    actor that keeps its own position integral (``MLPConfig.position_integral``) flies tasks without one."""
    want = getattr(policy, "obs_dim", None)
    if want is None or want == task.obs_dim:
        return
    integrates = getattr(getattr(policy, "config", None), "position_integral", 0.0) > 0
    if integrates and task.config.position_integral > 0:
        raise ValueError(f"the policy reads {want} observation floats and integrates its position error itself, "
                         f"task {task.config.name} gives {task.obs_dim}: fly it with task.position_integral=0")
    hint = "fly it with the task.action_history and task.position_integral it was trained with"
    run_config = Path(path).parents[2] / "config.yaml" if path and len(Path(path).parents) > 2 else None
    if run_config is not None and run_config.is_file():
        t = OmegaConf.load(run_config).get("task", {})
        hint = (f"its training run used task.action_history={t.get('action_history', 0)} "
                + ("(and integrates its position error itself: keep task.position_integral=0)" if integrates else
                   f"task.position_integral={t.get('position_integral', 0.0)}"))
    raise ValueError(f"the policy reads {want} observation floats, task {task.config.name} gives {task.obs_dim}: {hint}")


def check_export(policy, task) -> None:
    """An export (``policy=export``) flies only a task that matches its manifest: observation and action size, the
    motor order, and a control period equal to its trained rate (``ManifestError``, one line naming what differs)."""
    manifest = getattr(policy, "manifest", None)
    if manifest is None:
        return
    from hardware.export.manifest import MOTOR_ORDER, check_manifest

    check_manifest(manifest, obs_dim=task.obs_dim, action_dim=4, motor_order=MOTOR_ORDER, rate_hz=1.0 / float(task.dt),
                   where=f"task {task.config.name} on this robot")


def evaluate_imitation(c: dict, run_dir: Path) -> dict:
    """A chunked checkpoint on an imitation task: ``task.eval.episodes`` episodes from seed
    ``task.eval.seed`` (the seeds ``robo train`` scores on), video of episode 0 -> metrics.json. The policy flies
    on ``device`` (``robo.imitation.evaluate.flying_on``: a policy that cannot act there from host observations
    stays on the CPU, with a warning); ``metrics.json`` records the device."""
    from robo.commands.imitation import evaluator
    from robo.imitation.evaluate import flying_on

    policy = make_policy(c["policy"])
    if not isinstance(policy, ChunkedPolicy):
        raise ValueError(f"task {c['task']['name']!r} needs a chunked imitation policy checkpoint "
                         f"(diffusion, energy, ...), got {type(policy).__name__}")
    task = c["task"]
    video = run_dir / "videos" if c["video"]["enabled"] else None
    with flying_on(policy, c.get("device", "auto")) as device:
        log.info("evaluating %s on %s", c["policy"].get("path") or c["policy"]["kind"], device)
        metrics = evaluator(task, int(task["eval"]["episodes"]), video, "eval.mp4")(policy, 0)
    metrics.update(task=task["name"], policy=str(c["policy"].get("path") or c["policy"]["kind"]), device=str(device))
    write_json(run_dir / "metrics.json", metrics)
    log.info("run folder: %s", run_dir)
    return metrics
