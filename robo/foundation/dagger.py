"""DAgger distillation of many RL teachers into one student that never sees the parameters.

The student flies ``envs_per_teacher`` copies of every teacher's quadrotor, split over one batched
sim per DAgger task (``dagger.tasks``, e.g. hover and a figure-eight; see ``dagger_fleets``). In each
sim, env ``b`` belongs to teacher ``b // k`` for the ``k`` envs per teacher of that task. Each teacher
labels the observations its own envs visit. Envs are laid out teacher-major, so labelling is one vmapped call
over ``obs.view(N, k, D)`` (all teachers share an architecture, ``robo.foundation.fleet``) instead of
N separate forwards.

``refine`` is a second DAgger whose labeller is the mean action of students already distilled (e.g.
of several DAgger seeds, ``StudentLabeller``): it labels any quadrotor, so the new student flies many
fresh quadrotors, one env each per DAgger task, instead of copies of the teachers'.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from policies.ema import make_ema
from policies.foundation import FoundationConfig, FoundationGRU, FoundationPolicy
from policies.mlp import MLPActor, MLPConfig, MLPPolicy
from robo.device import resolve_device
from robo.evaluate import make_fleet_task
from robo.foundation.config import DaggerConfig, merged_task
from robo.foundation.fleet import Labeller, StudentLabeller, TeacherEnsemble, feedforward_observations
from sims.envs import OBS_DIM
from sims.envs.task import BatchedQuadrotorTask
from sims.quadrotor.params import QuadrotorParams

log = logging.getLogger(__name__)
STUDENTS = ("gru", "mlp")


def make_student(kind: str, cfg: DaggerConfig) -> nn.Module:
    """A fresh student network: ``gru`` (Dense H -> GRU H -> Dense 4, H = ``gru_hidden``; RAPTOR's H is 16)
    or ``mlp``."""
    torch.manual_seed(cfg.seed)
    if kind == "gru":
        return FoundationGRU(FoundationConfig(obs_dim=OBS_DIM, hidden_dim=cfg.gru_hidden))
    if kind == "mlp":
        return MLPActor(MLPConfig(obs_dim=OBS_DIM, hidden_dims=list(cfg.mlp_hidden)))
    raise ValueError(f"unknown student {kind!r}; choose one of {STUDENTS}")


def as_policy(model: nn.Module):
    """The robo policy around a student network (saves/loads/exports like any other)."""
    return FoundationPolicy(model.config, model) if isinstance(model, FoundationGRU) else MLPPolicy(model.config, model)


def initial_hidden(model: nn.Module, batch: int) -> torch.Tensor:
    """(batch, H) learned initial state (on the graph); (batch, 1) zeros for stateless students."""
    if isinstance(model, FoundationGRU):
        return model.initial_hidden.expand(batch, -1)
    return torch.zeros(batch, 1, device=next(model.parameters()).device)


def student_step(model: nn.Module, obs: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One step, unclipped: obs (B, 22), h (B, H) -> action (B, 4), h' (B, H)."""
    if isinstance(model, FoundationGRU):
        h = model.gru(model.input_activation(model.input_layer(obs)), h)
        return model.output_activation(model.output_layer(h)), h
    return model(obs), h


@dataclass
class Sequences:
    """One DAgger iteration's data. obs (T, B, 22) what the student saw; labels (T, B, 4) the
    teachers' actions; starts (T, B) bool, true on the first step of an episode."""

    obs: torch.Tensor
    labels: torch.Tensor
    starts: torch.Tensor

    def to(self, device: torch.device) -> "Sequences":
        return Sequences(self.obs.to(device), self.labels.to(device), self.starts.to(device))


@torch.no_grad()
def collect(task: BatchedQuadrotorTask, model: nn.Module, teachers: TeacherEnsemble | Labeller | StudentLabeller,
            steps: int, beta: float, generator: torch.Generator, feedforward: float = 0.0) -> tuple[Sequences, dict]:
    """Fly the student (the teacher's action instead with probability ``beta`` per env and step)
    for ``steps`` steps from fresh starts; envs that terminate restart at once, and so do a recurrent
    labeller's states. ``teachers`` label (a ``StudentLabeller`` labels with students, trimmed where it
    carries a shift); with ``feedforward`` > 0 (s^2) they label a moving reference as if led
    ``feedforward`` times its acceleration ahead (``feedforward_observations``)."""
    labeller = Labeller(teachers) if isinstance(teachers, TeacherEnsemble) else teachers
    B = task.num_envs
    obs = task.reset()
    labeller.reset()
    h = initial_hidden(model, B).detach().clone()
    starts = torch.ones(B, dtype=torch.bool)
    rec_obs, rec_labels, rec_starts = [], [], []
    crashes = 0
    for _ in range(steps):
        h = torch.where(starts[:, None], initial_hidden(model, B), h)
        student_obs = obs[:, :OBS_DIM]
        action, h = student_step(model, student_obs, h)
        label = labeller.act(feedforward_observations(obs, task, feedforward) if feedforward else obs)
        use_teacher = torch.rand(B, generator=generator) < beta
        rec_obs.append(student_obs)
        rec_labels.append(label)
        rec_starts.append(starts)
        r = task.step(torch.where(use_teacher[:, None], label, action.clamp(-1.0, 1.0)))
        done = r.terminated | r.truncated
        crashes += int(r.terminated.sum())
        if bool(done.any()):
            obs = task.reset(done)
            labeller.reset(done)
        else:
            obs = r.obs
        starts = done
    err = task.state[:, :3] - task.reference()[0]
    stats = {"beta": beta, "crashes": crashes, "final_mean_error": float(err.norm(dim=-1).mean())}
    return Sequences(torch.stack(rec_obs), torch.stack(rec_labels), torch.stack(rec_starts)), stats


def bptt_epoch(model: nn.Module, optimizer: torch.optim.Optimizer, data: Sequences, bptt: int, batch_envs: int,
               generator: torch.Generator, after_step=None) -> float:
    """One pass over ``data`` in env minibatches, truncated BPTT windows of ``bptt`` steps (the
    hidden state carries across windows, detached; it restarts where ``starts`` is true). Mean MSE.
    ``after_step()`` runs after every optimizer step (e.g. a weight average's update)."""
    T, B = data.starts.shape
    losses = []
    for idx in torch.randperm(B, generator=generator).split(batch_envs):
        h = initial_hidden(model, len(idx))
        for t0 in range(0, T, bptt):
            loss = 0.0
            for t in range(t0, min(t0 + bptt, T)):
                h = torch.where(data.starts[t, idx, None], initial_hidden(model, len(idx)), h)
                a, h = student_step(model, data.obs[t, idx], h)
                loss = loss + ((a - data.labels[t, idx]) ** 2).mean()
            loss = loss / (min(t0 + bptt, T) - t0)
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            if after_step is not None:
                after_step()
            h = h.detach()
            losses.append(float(loss.detach()))
    return float(np.mean(losses))


def dagger_fleets(ensemble: TeacherEnsemble, quads: list[QuadrotorParams], task: dict | str,
                  cfg: DaggerConfig) -> list[tuple[BatchedQuadrotorTask, Labeller]]:
    """The batched sims the students fly, one per entry of ``cfg.tasks`` (overrides of the teachers'
    ``task``, each with its own starts), and the labeller of their envs (the same for all: every sim
    has the same teacher-major layout). Each teacher's ``envs_per_teacher / len(tasks)`` envs per task
    fly its own quadrotor."""
    return task_fleets(task, quads, cfg.envs_per_teacher // len(cfg.tasks), Labeller(ensemble), cfg)


def task_fleets(task: dict | str, flyers: list[QuadrotorParams], envs_per_flyer: int, labeller,
                cfg: DaggerConfig) -> list[tuple[BatchedQuadrotorTask, Labeller | StudentLabeller]]:
    """One batched sim per entry of ``cfg.tasks`` (``task`` with those overrides, seeded ``cfg.seed + 1000 i``),
    ``envs_per_flyer`` envs per quadrotor of ``flyers`` (group-major), each paired with ``labeller``."""
    return [(make_fleet_task(merged_task(task, overrides), flyers, envs_per_flyer, cfg.seed + 1000 * i), labeller)
            for i, overrides in enumerate(cfg.tasks)]


def collect_fleets(fleets: list[tuple[BatchedQuadrotorTask, Labeller | StudentLabeller]], model: nn.Module, steps: int,
                   beta: float, generator: torch.Generator, feedforward: float = 0.0) -> tuple[Sequences, dict]:
    """``collect`` on every fleet; the sequences are joined along the env axis (T, sum B, ...)."""
    parts = [collect(sim, model, labeller, steps, beta, generator, feedforward) for sim, labeller in fleets]
    data = Sequences(*(torch.cat([getattr(d, f.name) for d, _ in parts], 1) for f in dataclasses.fields(Sequences)))
    envs = [sim.num_envs for sim, _ in fleets]
    stats = {"beta": beta, "crashes": sum(s["crashes"] for _, s in parts),
             "final_mean_error": float(np.average([s["final_mean_error"] for _, s in parts], weights=envs))}
    return data, stats


def distill(kind: str, teachers: list[MLPPolicy], quads: list[QuadrotorParams], task: dict | str,
            cfg: DaggerConfig, progress=None, validate=None):
    """DAgger: returns the student as a robo policy and the per-iteration history.

    ``teachers[i]`` is the teacher of ``quads[i]``; ``task`` the teachers' task config (the
    student reads only the first 22 observation floats, never the parameters). ``validate(policy)
    -> {"hover_success_rate", "hover_median_error_m", ...}`` (e.g. the hover test on validation
    quadrotors that are neither the teachers' nor the held-out ones, optionally the figure-eight too)
    scores the student after every iteration, and the best iteration's student (``validation_score``)
    is returned: the students' quality swings from one iteration to the next, as the RL teachers' does.
    """
    if len(teachers) != len(quads):
        raise ValueError(f"{len(teachers)} teachers for {len(quads)} quadrotors; give one teacher per quadrotor")
    model = make_student(kind, cfg)
    fleets = dagger_fleets(TeacherEnsemble(teachers), quads, task, cfg)
    return _dagger(kind, model, fleets, cfg, cfg.label_feedforward, progress, validate)


def refine(kind: str, students: list, quads: list[QuadrotorParams], task: dict | str, cfg: DaggerConfig,
           progress=None, validate=None, feedforward: float = 0.0, shift: np.ndarray | None = None):
    """DAgger of a fresh ``kind`` student from the mean action of ``students`` (robo policies, e.g. the
    students of several DAgger seeds; ``StudentLabeller``) over ``quads``: any quadrotors, each flying one
    env per entry of ``cfg.tasks``. Otherwise as ``distill`` (iterations, weight average, validation); the
    students label with ``feedforward`` (s^2, as ``cfg.label_feedforward`` for teachers; default off: students
    distilled with feedforward labels already lead moving references) and, with ``shift`` (N, 3) m, trimmed
    on each quadrotor (``robo.foundation.trim.trimmed_students``). Returns the policy and the
    per-iteration history."""
    if not quads:
        raise ValueError("refine needs at least one quadrotor to fly")
    if shift is not None and np.shape(shift) != (len(quads), 3):
        raise ValueError(f"shift has shape {np.shape(shift)}, expected ({len(quads)}, 3): one per quadrotor")
    fleets = task_fleets(task, quads, 1, StudentLabeller(students, shift), cfg)
    return _dagger(kind, make_student(kind, cfg), fleets, cfg, feedforward, progress, validate)


def _dagger(kind: str, model: nn.Module, fleets: list, cfg: DaggerConfig, feedforward: float, progress, validate):
    """The DAgger loop of ``distill`` and ``refine`` over ``fleets`` ((task, labeller) pairs)."""
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.learning_rate)
    average = None if cfg.ema_decay is None else make_ema(model, max_decay=cfg.ema_decay)
    kept = model if average is None else average.module
    update = None if average is None else (lambda: average.update_parameters(model))
    gen = torch.Generator().manual_seed(cfg.seed)
    device = resolve_device(cfg.device)
    buffer: list[Sequences] = []
    history = []
    best = None  # (key, iteration, state_dict) with validate
    for it in range(cfg.iterations):
        beta = cfg.beta_start * cfg.beta_decay ** it
        data, stats = collect_fleets(fleets, model, cfg.steps_per_iteration, beta, gen, feedforward)
        buffer = (buffer + [data])[-cfg.buffer_iterations:]
        model.train()
        on_device = [m.to(device) for m in (model, average) if m is not None]  # they collect on the CPU
        loss = [bptt_epoch(model, optimizer, d.to(device), cfg.bptt, cfg.batch_envs, gen, update)
                for _ in range(cfg.epochs) for d in buffer][-1]
        for m in on_device:
            m.to("cpu")
        model.eval()
        kept.eval()
        history.append({"iteration": it, "loss": loss, **stats})
        if validate is not None:
            v = validate(as_policy(kept))
            history[-1].update({f"validation_{k}": x for k, x in v.items()})
            key = validation_score(v)
            if best is None or key > best[0]:
                best = (key, it, copy.deepcopy(kept.state_dict()))
        log.info("dagger %s iteration %d: beta %.3f, loss %.5f, crashes %d", kind, it, beta, loss, stats["crashes"])
        if progress is not None:
            progress(history[-1])
    if best is not None:
        kept.load_state_dict(best[2])
        for h in history:
            h["selected"] = h["iteration"] == best[1]
    return as_policy(kept), history


def validation_score(v: dict[str, float]) -> tuple[float, ...]:
    """How ``distill`` ranks validation results (larger is better): hover success first; among equals,
    with a figure-eight in ``v`` the fewest figure-eight crashes, then the lowest RMSE, else the lowest
    median hover error. Hover success on a few validation quadrotors saturates (1.0 for most late
    iterations), and the median hover error then picks among them by noise (docs/experiments/foundation.md)."""
    if "figure_eight_rmse_m" in v:
        return v["hover_success_rate"], -v["figure_eight_crash_rate"], -v["figure_eight_rmse_m"]
    return v["hover_success_rate"], -v["hover_median_error_m"]


def validation_key(history: list[dict]) -> tuple[float, ...]:
    """``validation_score`` of the iteration ``distill`` kept."""
    h = next(h for h in history if h.get("selected"))
    prefix = "validation_"
    return validation_score({k[len(prefix):]: x for k, x in h.items() if k.startswith(prefix)})


def best_of_restarts(run, cfg: DaggerConfig, validate=None):
    """``run(cfg_r)`` (a DAgger run returning the policy and its history) ``cfg.restarts`` times with
    seeds ``cfg.seed``, ``cfg.seed + 1``, ..., keeping the run that validates best (the first among
    equals). Returns the policy and its history (each row names its ``restart``); one restart needs no
    ``validate``."""
    if cfg.restarts > 1 and validate is None:
        raise ValueError(f"dagger.restarts={cfg.restarts} needs validation quadrotors to choose among them "
                         f"(dagger.validation_quadrotors > 0)")
    runs = []
    for r in range(cfg.restarts):
        policy, history = run(dataclasses.replace(cfg, seed=cfg.seed + r))
        runs.append((validation_key(history) if validate else (0.0, 0.0), r, policy,
                     [{**h, "restart": r} for h in history]))
        log.info("dagger restart %d: validation %s", r, runs[-1][0])
    _, r, policy, history = max(runs, key=lambda x: (x[0], -x[1]))
    return policy, history


def distill_best(kind: str, teachers: list[MLPPolicy], quads: list[QuadrotorParams], task: dict | str,
                 cfg: DaggerConfig, validate=None, progress=None):
    """``distill`` ``cfg.restarts`` times (seeds ``cfg.seed``, ``cfg.seed + 1``, ...) and keep the student
    that validates best (``best_of_restarts``): a recurrent student's quality depends much on DAgger's seed."""
    return best_of_restarts(lambda c: distill(kind, teachers, quads, task, c, progress, validate), cfg, validate)
