"""robo.foundation: config errors, quadrotor sampling, DAgger labelling, Ray teachers with retry
and resume, and a 2-teacher end-to-end run whose student must hover better than an untrained one."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from policies.mlp import MLPConfig, MLPPolicy
from policies.registry import load_policy
from robo.evaluate import make_fleet_task
from robo.foundation import (DaggerConfig, FoundationRunConfig, HeldOutConfig, Labeller, Manifest, TeacherEnsemble,
                             collect, held_out_quadrotors, run_pipeline, run_teachers, sample_quadrotors, train_teacher)
from robo.foundation.dagger import as_policy, bptt_epoch, make_student
from robo.foundation.evaluate import evaluate_policy
from robo.foundation.teachers import teacher_specs
from robo.rl.trainer import evaluation_key
from robo.run_dir import read_json
from tests.hydra_configs import composed_dict

# Crazyflie-sized quadrotors with a comfortable thrust margin: what a few thousand RL steps can fly.
SMALL_QUADS = {"mass": [0.025, 0.04], "thrust_to_weight": [2.5, 3.5], "torque_to_inertia": [400.0, 800.0],
               "motor_time_constant_rising": [0.02, 0.04], "motor_time_constant_falling_ratio": [1.0, 2.0]}


def tiny_config(teachers: int = 2, steps: int = 3000, **sections) -> FoundationRunConfig:
    d = {"teachers": teachers, "seed": 0, "randomization": {"base": "crazyflie", **SMALL_QUADS},
         "teacher": {"total_steps": steps, "eval_every": steps, "checkpoint_every": steps, "eval_envs": 8},
         "ray": {"num_cpus": 1, "max_retries": 1},
         "dagger": {"envs_per_teacher": 8, "iterations": 4, "steps_per_iteration": 200, "epochs": 2, "bptt": 25},
         "eval": {"quadrotors": 4, "starts": 4, "hover_seconds": 3.0, "figure_eight_seconds": 2.0, "raptor": False}}
    for k, v in sections.items():
        d[k] = {**d.get(k, {}), **v} if isinstance(v, dict) else v
    return FoundationRunConfig.from_dict(d)


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def ray_local():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


# Config ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad, match", [
    ({"teachers": 0}, "teachers must be a positive integer"),
    ({"teacher": {"population": -1}}, "teacher.population must be 0"),
    ({"dagger": {"gru_hidden": 0}}, "dagger.gru_hidden"),
    ({"dagger": {"validation_quadrotors": 4, "validation_seed": 100_000}}, "validation_seed"),
    ({"dagger": {"restarts": 2}}, "restarts > 1 needs"),
    ({"dagger": {"ensemble": 0}}, "dagger.ensemble"),
    ({"dagger": {"ensemble": 2, "refine_quadrotors": 0}}, "dagger.refine_quadrotors"),
    ({"dagger": {"ensemble": 2, "refine_seed": 100_000}}, "refine_seed"),
    ({"dagger": {"validation_figure_eight": True}}, "validation_figure_eight needs"),
    ({"dagger": {"bptt": 0}}, "dagger.bptt"),
    ({"dagger": {"beta_decay": 1.5}}, "beta"),
    ({"ray": {"max_retries": -1}}, "max_retries"),
    ({"dagger": {"tasks": [{}, {}, {"name": "figure_eight"}]}}, r"multiple of len\(dagger.tasks\) = 3"),
    ({"dagger": {"tasks": []}}, "non-empty list"),
    ({"dagger": {"tasks": ["figure_eight"]}}, r"tasks\[0\] must be a dict"),
    ({"dagger": {"tasks": [{}, {"init": {"velocty": 1.0}}]}}, r"tasks\[1\].*velocty"),
    ({"dagger": {"ema_decay": 1.0}}, "ema_decay"),
    ({"dagger": {"label_feedforward": -0.1}}, "label_feedforward"),
    ({"dagger": {"refine_feedforward": float("nan")}}, "refine_feedforward"),
    ({"teacher": {"total_stepz": 5}}, r"teacher\.total_stepz"),
    ({"randomization": {"mass": [3.0, 0.02]}}, "low > high"),
    ({"bogus": 1}, "bogus"),
])
def test_bad_config_raises_a_clear_error(bad, match):
    with pytest.raises(ValueError, match=match):
        tiny_config(**bad)


@pytest.mark.parametrize("section, key", [("dagger", "variants_per_teacher"), ("dagger", "variant_scale"),
                                          ("dagger", "final_learning_rate"), ("teacher", "finetune_steps"),
                                          ("teacher", "finetune_overrides")])
def test_a_removed_key_is_an_unknown_key_named_in_one_line(section, key):
    with pytest.raises(ValueError, match=rf"unknown config key\(s\) \['{section}\.{key}'\]") as e:
        tiny_config(**{section: {key: 1}})
    assert "\n" not in str(e.value)


def test_held_out_seed_must_differ_from_the_teachers():
    with pytest.raises(ValueError, match="held-out quadrotors would be the teachers"):
        held_out_quadrotors(tiny_config(seed=5, eval={"seed": 5}))


def test_quadrotors_are_seeded_sorted_and_in_range():
    a = sample_quadrotors({"base": "crazyflie"}, 16, seed=3)
    b = sample_quadrotors({"base": "crazyflie"}, 16, seed=3)
    masses = [q.mass for q in a]
    assert masses == [q.mass for q in b] and masses == sorted(masses)
    assert 0.02 <= masses[0] and masses[-1] <= 3.0 and masses[-1] / masses[0] > 5
    assert [q.mass for q in sample_quadrotors({"base": "crazyflie"}, 16, seed=4)] != masses


# DAgger labelling ---------------------------------------------------------------------------------
def _teachers(n: int, seed: int = 0) -> list[MLPPolicy]:
    torch.manual_seed(seed)
    return [MLPPolicy(MLPConfig(hidden_dims=[8])) for _ in range(n)]


def test_teacher_ensemble_labels_each_group_with_its_own_teacher():
    teachers = _teachers(3)
    obs = torch.randn(3, 5, 22)
    labels = TeacherEnsemble(teachers)(obs)
    assert labels.shape == (3, 5, 4)
    for n, t in enumerate(teachers):
        torch.testing.assert_close(labels[n], t.act(obs[n]), rtol=1e-5, atol=1e-6)
    assert not torch.allclose(labels[0], TeacherEnsemble(teachers[1:2])(obs[:1])[0])
    with pytest.raises(ValueError, match=r"expected \(3, k, 22\)"):
        TeacherEnsemble(teachers)(torch.randn(2, 5, 22))
    with pytest.raises(ValueError, match="no teachers"):
        TeacherEnsemble([])


def test_labeller_acts_like_each_env_s_teacher():
    teachers = _teachers(2)
    obs = torch.randn(6, 22)
    labels = Labeller(TeacherEnsemble(teachers)).act(obs)
    for b in range(6):  # env b: teacher b // 3
        torch.testing.assert_close(labels[b], teachers[b // 3].act(obs[b:b + 1])[0], rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="multiple of the 2 teachers"):
        Labeller(TeacherEnsemble(teachers)).act(torch.randn(5, 22))


def test_collect_records_sequences_labelled_by_the_env_s_teacher():
    teachers = _teachers(2)
    quads = sample_quadrotors({"base": "crazyflie", **SMALL_QUADS}, 2, seed=0)
    task = make_fleet_task("hover", quads, 3, seed=0)
    assert torch.allclose(task.sim.params.mass[:3], torch.tensor(quads[0].mass, dtype=torch.float32))
    assert torch.allclose(task.sim.params.mass[3:], torch.tensor(quads[1].mass, dtype=torch.float32))
    student = make_student("gru", DaggerConfig())
    data, stats = collect(task, student, TeacherEnsemble(teachers), 40, 0.5, torch.Generator().manual_seed(0))
    assert data.obs.shape == (40, 6, 22) and data.labels.shape == (40, 6, 4) and data.starts.shape == (40, 6)
    assert bool(data.starts[0].all()) and stats["beta"] == 0.5
    for b in range(6):  # env b's label is teacher b // 3 acting on env b's observation
        torch.testing.assert_close(data.labels[:, b], teachers[b // 3].act(data.obs[:, b]), rtol=1e-5, atol=1e-6)


def test_dagger_tasks_split_each_teacher_s_envs_and_override_the_teachers_task():
    """``dagger.tasks`` flies every teacher's quadrotor on each listed task (the teachers' task with the
    overrides merged in), ``envs_per_teacher / len(tasks)`` envs each; the sequences join along the env
    axis, each env still labelled by its own teacher."""
    from robo.foundation.dagger import collect_fleets, dagger_fleets

    teachers = _teachers(2)
    quads = sample_quadrotors({"base": "crazyflie", **SMALL_QUADS}, 2, seed=0)
    teacher_task = {"name": "hover", "init": {"angle_deg": 10.0}}
    cfg = DaggerConfig(envs_per_teacher=4, tasks=[{}, {"name": "figure_eight", "init": {"velocity": 1.0}}])
    fleets = dagger_fleets(TeacherEnsemble(teachers), quads, teacher_task, cfg)
    (hover, _), (eight, _) = fleets
    assert hover.num_envs == eight.num_envs == 4
    assert hover.config.name == "hover" and eight.config.name == "figure_eight"
    assert eight.config.init.velocity == 1.0 and eight.config.init.angle_deg == 10.0  # merged, not replaced
    assert hover.config.init.velocity == 0.0
    torch.testing.assert_close(eight.sim.params.mass[:2], torch.full((2,), quads[0].mass))
    data, stats = collect_fleets(fleets, make_student("gru", cfg), 30, 0.5, torch.Generator().manual_seed(0))
    assert data.obs.shape == (30, 8, 22) and data.starts.shape == (30, 8) and stats["beta"] == 0.5
    for b, teacher in enumerate([0, 0, 1, 1, 0, 0, 1, 1]):  # hover envs, then figure-eight envs
        torch.testing.assert_close(data.labels[:, b], teachers[teacher].act(data.obs[:, b]), rtol=1e-5, atol=1e-6)
    velocity_error = data.obs[0, :, 12:15].norm(dim=-1)  # at t = 0: hover starts at rest, on a still reference;
    assert float(velocity_error[:4].max()) < 1e-6  # the figure-eight's reference moves at 1.48 m/s, the quad <= 1 m/s
    assert float(velocity_error[4:].min()) > 0.4


def test_feedforward_labels_read_the_errors_to_a_reference_led_by_its_acceleration():
    """``dagger.label_feedforward`` = c: on a figure-eight each teacher labels the observation it would see if it
    aimed at p_ref + c a_ref with velocity v_ref + c j_ref; on a still reference the labels are unchanged."""
    from robo.foundation.dagger import collect_fleets, dagger_fleets
    from robo.foundation.fleet import feedforward_observations

    teachers = _teachers(2)
    quads = sample_quadrotors({"base": "crazyflie", **SMALL_QUADS}, 2, seed=0)
    cfg = DaggerConfig(envs_per_teacher=4, tasks=[{}, {"name": "figure_eight"}], label_feedforward=0.1)
    fleets = dagger_fleets(TeacherEnsemble(teachers), quads, "hover", cfg)
    data, _ = collect_fleets(fleets, make_student("gru", cfg), 30, 0.0, torch.Generator().manual_seed(0),
                             cfg.label_feedforward)
    eight = fleets[1][0]
    acc, jerk = eight.reference_derivatives()  # at the figure-eight sim's current time, as its observe()
    led = feedforward_observations(eight.observe(), eight, 0.1)
    torch.testing.assert_close(led[:, 0:3], eight.observe()[:, 0:3] - 0.1 * acc.float())
    torch.testing.assert_close(led[:, 12:15], eight.observe()[:, 12:15] - 0.1 * jerk.float())
    torch.testing.assert_close(led[:, 3:12], eight.observe()[:, 3:12])
    for b, teacher in enumerate([0, 0, 1, 1]):  # hover envs: plain labels
        torch.testing.assert_close(data.labels[:, b], teachers[teacher].act(data.obs[:, b]), rtol=1e-5, atol=1e-6)
    differs = (data.labels[:, 4:] - torch.stack([teachers[t].act(data.obs[:, 4 + i]) for i, t in
                                                 enumerate([0, 0, 1, 1])], 1)).abs().amax()
    assert float(differs) > 1e-3  # figure-eight envs: labelled on the led errors
    with pytest.raises(ValueError, match="feedforward gain"):
        feedforward_observations(led, eight, -1.0)


def test_feedforward_removes_most_of_a_tracking_lag():
    """RAPTOR's released policy on the held-out test's figure-eight (1 m, 6 s) on a Crazyflie, reading its errors
    to the reference led by 0.06 s^2 x its acceleration: measured 0.175 -> 0.108 m RMSE (128 starts)."""
    from policies.foundation import load_raptor
    from robo.evaluate import flight_metrics, rollout
    from robo.foundation.fleet import feedforward_observations
    from sims.envs import make_robot

    class Led:
        def __init__(self, policy, task, gain):
            self.policy, self.task, self.gain = policy, task, gain

        def reset(self):
            self.policy.reset()

        def act(self, obs):
            return self.policy.act(feedforward_observations(obs, self.task, self.gain))

    rmse = {}
    for gain in (0.0, 0.06):
        task = make_fleet_task("figure_eight", [make_robot("crazyflie")], 32, seed=0)
        rmse[gain] = flight_metrics(rollout(Led(load_raptor(), task, gain), task, 6.0))["rmse"]
    assert rmse[0.06] < 0.75 * rmse[0.0], rmse


@pytest.mark.parametrize("kind", ["gru", "mlp"])
def test_truncated_bptt_fits_the_labels(kind):
    teachers = _teachers(2)
    quads = sample_quadrotors({"base": "crazyflie", **SMALL_QUADS}, 2, seed=1)
    cfg = DaggerConfig(learning_rate=1e-2)
    data, _ = collect(make_fleet_task("hover", quads, 4, seed=0), make_student(kind, cfg), TeacherEnsemble(teachers),
                      60, 1.0, torch.Generator().manual_seed(0))
    model = make_student(kind, cfg)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.learning_rate)
    gen = torch.Generator().manual_seed(0)
    first = bptt_epoch(model, opt, data, bptt=20, batch_envs=4, generator=gen)
    for _ in range(15):
        last = bptt_epoch(model, opt, data, bptt=20, batch_envs=4, generator=gen)
    assert last < 0.5 * first


def test_validation_keeps_the_best_dagger_iteration():
    """With ``validate``, ``distill`` returns the student of the iteration that validated best (by hover
    success, then median error), not the last one, and marks it in the history."""
    import copy

    from robo.foundation import distill

    teachers = _teachers(2)
    quads = sample_quadrotors({"base": "crazyflie", **SMALL_QUADS}, 2, seed=2)
    scores = iter([(0.2, 0.3), (0.8, 0.2), (0.8, 0.1), (0.5, 0.05)])  # iteration 2 wins: equal success, lower error
    seen = []

    def validate(policy):
        seen.append(copy.deepcopy(policy.model.state_dict()))
        success, median = next(scores)
        return {"hover_success_rate": success, "hover_median_error_m": median}

    cfg = DaggerConfig(iterations=4, steps_per_iteration=20, envs_per_teacher=2, epochs=1, bptt=10, batch_envs=4)
    policy, history = distill("mlp", teachers, quads, "hover", cfg, validate=validate)
    assert [h["selected"] for h in history] == [False, False, True, False]
    assert history[2]["validation_hover_success_rate"] == 0.8
    for k, v in policy.model.state_dict().items():
        torch.testing.assert_close(v, seen[2][k])
    assert any(not torch.equal(seen[2][k], seen[3][k]) for k in seen[2])  # the last iteration differs


def test_with_the_figure_eight_validation_ranks_equal_hover_by_tracking():
    """``dagger.validation_figure_eight``: the validator flies the figure-eight on the validation
    quadrotors too, and ``validation_score`` ranks equal hover success by figure-eight crashes, then
    RMSE, no longer by the median hover error; hover success still comes first."""
    from robo.foundation.dagger import validation_key, validation_score
    from robo.foundation.pipeline import validator

    def v(success, median, crashes=None, rmse=None):
        out = {"hover_success_rate": success, "hover_median_error_m": median}
        return out if rmse is None else {**out, "figure_eight_crash_rate": crashes, "figure_eight_rmse_m": rmse}

    assert validation_score(v(1.0, 0.02)) > validation_score(v(1.0, 0.03))  # hover only: the median error
    ranked = [v(0.9, 0.01, 0.0, 0.10), v(1.0, 0.01, 0.1, 0.10), v(1.0, 0.03, 0.0, 0.15), v(1.0, 0.04, 0.0, 0.13)]
    assert sorted(ranked, key=validation_score) == ranked  # worst to best
    history = [{"selected": False, "validation_hover_success_rate": 1.0},
               {"selected": True, **{f"validation_{k}": x for k, x in ranked[2].items()}}]
    assert validation_key(history) == validation_score(ranked[2])

    cfg = FoundationRunConfig.from_dict({"dagger": {"validation_quadrotors": 2, "validation_figure_eight": True},
                                         "eval": {"starts": 2, "figure_eight_seconds": 1.0, "hover_seconds": 1.0}})
    untrained = as_policy(make_student("gru", cfg.dagger))
    scores = validator(cfg)(untrained)
    assert {"hover_success_rate", "figure_eight_rmse_m", "figure_eight_crash_rate"} <= set(scores)
    assert "figure_eight_rmse_m" not in validator(dataclasses.replace(
        cfg, dagger=dataclasses.replace(cfg.dagger, validation_figure_eight=False)))(untrained)


def test_the_weight_average_is_what_is_validated_and_kept():
    """With ``ema_decay``, ``distill`` validates and returns the moving average of the student's weights:
    decay 0 is the raw student itself (same weights as without it); a slow average lags behind the raw
    student, nearer the initial weights."""
    from robo.foundation import distill

    teachers = _teachers(2)
    quads = sample_quadrotors({"base": "crazyflie", **SMALL_QUADS}, 2, seed=2)
    cfg = DaggerConfig(iterations=3, steps_per_iteration=20, envs_per_teacher=2, epochs=4, bptt=10, batch_envs=4,
                       ema_decay=None)
    initial = make_student("mlp", cfg).state_dict()

    def distance(policy):
        sd = policy.model.state_dict()
        return float(sum((sd[k] - initial[k]).norm() for k in initial))

    raw, _ = distill("mlp", teachers, quads, "hover", cfg)
    same, _ = distill("mlp", teachers, quads, "hover", dataclasses.replace(cfg, ema_decay=0.0))
    slow, _ = distill("mlp", teachers, quads, "hover", dataclasses.replace(cfg, ema_decay=0.99))
    for k, v in raw.model.state_dict().items():
        torch.testing.assert_close(same.model.state_dict()[k], v)
    assert distance(raw) > 0
    assert distance(slow) < 0.95 * distance(raw)


def test_restarts_keep_the_student_that_validates_best():
    """``distill_best``: ``restarts`` students with consecutive seeds, the best validated one returned."""
    from robo.foundation.dagger import distill_best

    teachers = _teachers(2)
    quads = sample_quadrotors({"base": "crazyflie", **SMALL_QUADS}, 2, seed=2)
    calls = []

    def validate(policy):  # restart 1 (calls 2-3) validates best
        calls.append(1)
        return {"hover_success_rate": 0.9 if len(calls) in (3, 4) else 0.1, "hover_median_error_m": 0.1}

    cfg = DaggerConfig(iterations=2, steps_per_iteration=10, envs_per_teacher=2, epochs=1, bptt=10, batch_envs=4,
                       restarts=3, seed=5)
    policy, history = distill_best("mlp", teachers, quads, "hover", cfg, validate=validate)
    assert len(calls) == 6 and {h["restart"] for h in history} == {1}
    with pytest.raises(ValueError, match="needs validation"):
        distill_best("mlp", teachers, quads, "hover", cfg)


def _students(n: int) -> list:
    return [as_policy(make_student("gru", DaggerConfig(seed=i))) for i in range(n)]


def test_student_labeller_averages_students_each_with_its_own_state():
    """``StudentLabeller``: the mean of the students' actions, each student carrying its own hidden state
    (as if it flew alone), reading the first 22 floats; ``reset(mask)`` restarts only the masked envs."""
    from robo.foundation.fleet import StudentLabeller

    students, alone = _students(2), _students(2)
    labeller = StudentLabeller(students)
    obs = torch.randn(5, 3, 30)  # (T, B, D): 8 floats past the students' 22, as a task's privileged ones

    def mean(policies, x):
        return (policies[0].act(x[:, :22]) + policies[1].act(x[:, :22])) / 2

    for t in range(4):
        torch.testing.assert_close(labeller.act(obs[t]), mean(alone, obs[t]))
    labeller.reset(torch.tensor([True, False, False]))
    fresh, a = _students(2), labeller.act(obs[4])
    torch.testing.assert_close(a[:1], mean(fresh, obs[4, :1]))  # env 0 restarted
    torch.testing.assert_close(a[1:], mean(alone, obs[4])[1:])  # envs 1 and 2 carry on
    assert not torch.allclose(a[1:], mean(fresh, obs[4, 1:]))  # ... and their states matter
    with pytest.raises(ValueError, match="no students"):
        StudentLabeller([])
    shift = np.array([[0.03, -0.02, 0.07], [0.0, 0.0, 0.0], [-0.1, 0.0, 0.05]])  # a trim per env
    moved = obs[0].clone()
    moved[:, 0:3] += torch.as_tensor(shift, dtype=torch.float32)
    torch.testing.assert_close(StudentLabeller(_students(2), shift).act(obs[0]), mean(_students(2), moved))
    with pytest.raises(ValueError, match="expected .B, 3."):
        StudentLabeller(students, np.zeros(3))


def test_collect_restarts_the_labeller_where_episodes_restart():
    """A recurrent labeller's states restart with the episodes: ``collect`` resets it at the start and
    then exactly where the envs restarted (the next step's ``starts``)."""

    class Recording:
        def __init__(self):
            self.resets = []

        def reset(self, mask=None):
            self.resets.append(None if mask is None else mask.clone())

        def act(self, obs):
            return torch.full((obs.shape[0], 4), -1.0)  # motors off: every env falls and restarts

    quads = sample_quadrotors({"base": "crazyflie", **SMALL_QUADS}, 2, seed=0)
    labeller = Recording()
    data, stats = collect(make_fleet_task("hover", quads, 2, seed=0), make_student("gru", DaggerConfig()), labeller,
                          150, 1.0, torch.Generator().manual_seed(0))
    restarts = [data.starts[t] for t in range(1, 150) if bool(data.starts[t].any())]
    assert stats["crashes"] > 0 and restarts
    assert labeller.resets[0] is None and len(labeller.resets) == 1 + len(restarts)
    for mask, starts in zip(labeller.resets[1:], restarts):
        assert torch.equal(mask, starts)


def _imitation_error(model, data) -> float:
    """Mean squared difference between ``model``'s actions along ``data``'s sequences and their labels."""
    from robo.foundation.dagger import initial_hidden, student_step

    h, err = initial_hidden(model, data.obs.shape[1]), 0.0
    with torch.no_grad():
        for t in range(data.obs.shape[0]):
            h = torch.where(data.starts[t, :, None], initial_hidden(model, data.obs.shape[1]), h)
            a, h = student_step(model, data.obs[t], h)
            err += float(((a - data.labels[t]) ** 2).mean())
    return err / data.obs.shape[0]


def test_refine_distils_the_students_mean_into_one_student_on_new_quadrotors():
    """``refine``: DAgger from the mean of students (here two copies of RAPTOR's released policy, so the
    labels are RAPTOR's) on quadrotors no teacher flew; the new student copies them far better than an
    untrained one on flights of its own."""
    from policies.foundation import load_raptor
    from robo.foundation.dagger import refine
    from robo.foundation.fleet import StudentLabeller

    quads = sample_quadrotors({"base": "crazyflie", **SMALL_QUADS}, 4, seed=3)
    cfg = DaggerConfig(iterations=6, steps_per_iteration=100, epochs=4, bptt=25, batch_envs=4, learning_rate=1e-2,
                       ema_decay=None)
    policy, history = refine("gru", [load_raptor(), load_raptor()], quads, "hover", cfg)
    assert len(history) == 6 and policy.model.config.hidden_dim == 16
    data, _ = collect(make_fleet_task("hover", quads, 2, seed=9), policy.model, StudentLabeller([load_raptor()]), 150,
                      0.0, torch.Generator().manual_seed(0))
    trained, untrained = _imitation_error(policy.model, data), _imitation_error(make_student("gru", cfg), data)
    assert trained < 0.3 * untrained
    with pytest.raises(ValueError, match="at least one quadrotor"):
        refine("gru", [load_raptor()], [], "hover", cfg)
    with pytest.raises(ValueError, match="one per quadrotor"):
        refine("gru", [load_raptor()], quads, "hover", cfg, shift=np.zeros((3, 3)))


def test_an_ensemble_distils_its_members_then_refines_them_into_one():
    """``dagger.ensemble`` E > 1: ``pipeline.distil`` trains E students on the teachers (DAgger seeds
    seed ... seed + E - 1), then refines their mean on ``refine_quadrotors`` new quadrotors."""
    from robo.foundation import distill
    from robo.foundation.pipeline import distil

    cfg = FoundationRunConfig.from_dict({
        "randomization": {"base": "crazyflie", **SMALL_QUADS},
        "dagger": {"iterations": 2, "steps_per_iteration": 20, "envs_per_teacher": 2, "epochs": 1, "bptt": 10,
                   "batch_envs": 4, "ensemble": 2, "refine_quadrotors": 3, "seed": 4}})
    teachers, quads = _teachers(2), sample_quadrotors(cfg.randomization, 2, seed=2)
    policy, history = distil("gru", teachers, quads, "hover", cfg)
    assert [h["member"] for h in history] == [0, 0, 1, 1, "refined", "refined"]
    _, second = distill("gru", teachers, quads, "hover", dataclasses.replace(cfg.dagger, seed=5))
    assert [h["loss"] for h in history[2:4]] == [h["loss"] for h in second]  # member 1 is DAgger seed 5
    assert policy.act(torch.randn(3, 22)).shape == (3, 4)


def test_restarts_of_an_ensemble_repeat_the_refinement_and_keep_the_best_validated(monkeypatch):
    """``dagger.restarts`` R with ``ensemble`` E: the E students are distilled once each, the refinement
    R times (seeds seed ... seed + R - 1), and the refinement that validates best is returned; with
    ``refine_trim`` the students' mean is trimmed on the new quadrotors once, for every refinement."""
    from robo.foundation import pipeline

    calls = []

    def validate(policy):  # members: calls 1-4; refinement 0: 5-6; refinement 1: 7-8, whose call 7 validates best
        calls.append(1)
        return {"hover_success_rate": 0.9 if len(calls) == 7 else 0.1, "hover_median_error_m": 0.1}

    trims, trim = [], pipeline.trimmed_students

    def counted_trim(students, quads, **kw):  # the real trim, shorter, counted
        trims.append(trim(students, quads, starts=2, seconds=1.0, settle=0.5, **kw))
        return trims[-1]

    monkeypatch.setattr(pipeline, "validator", lambda cfg: validate)
    monkeypatch.setattr(pipeline, "trimmed_students", counted_trim)
    cfg = FoundationRunConfig.from_dict({
        "randomization": {"base": "crazyflie", **SMALL_QUADS},
        "dagger": {"iterations": 2, "steps_per_iteration": 20, "envs_per_teacher": 2, "epochs": 1, "bptt": 10,
                   "batch_envs": 4, "ensemble": 2, "refine_quadrotors": 3, "seed": 4, "restarts": 2,
                   "validation_quadrotors": 2, "refine_trim": True}})
    policy, history = pipeline.distil("gru", _teachers(2), sample_quadrotors(cfg.randomization, 2, seed=2), "hover",
                                      cfg)
    assert len(calls) == 8
    assert len(trims) == 1 and trims[0].shape == (3, 3)  # the students' mean trimmed once, on the 3 new quadrotors
    members, refined = history[:4], history[4:]
    assert [(h["member"], "restart" in h) for h in members] == [(0, False), (0, False), (1, False), (1, False)]
    assert [(h["member"], h["restart"]) for h in refined] == [("refined", 1), ("refined", 1)]
    assert [h["selected"] for h in refined] == [True, False]
    assert policy.act(torch.randn(3, 22)).shape == (3, 4)


# Ray teachers: manifest, retry, resume ------------------------------------------------------------
def test_a_failed_teacher_is_retried_and_resumes_from_its_checkpoint(tmp_path, ray_local):
    cfg = tiny_config(teachers=1, steps=2000, teacher={"checkpoint_every": 1000})

    def flaky(spec: dict) -> dict:  # first attempt: train half way (checkpoint), then die
        marker = Path(spec["dir"]) / "injected_failure"
        if not marker.exists():
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.touch()
            half = json.loads(json.dumps(spec))
            half["config"]["total_steps"] = 1000
            train_teacher(half)
            raise RuntimeError("injected failure after the first checkpoint")
        return train_teacher(spec)

    manifest = run_teachers(cfg, tmp_path, flaky)
    t = read_json(tmp_path / "manifest.json")["teachers"][0]
    assert t["status"] == "done" and t["attempts"] == 2 and "injected failure" in t["error"]
    assert t["resumed_from_step"] >= 1000
    history = read_json(Path(t["dir"]) / "eval_history.json")
    assert history[-1]["step"] >= 2000  # trained to the end; the teacher is its best evaluation
    assert evaluation_key(t["score"]) <= min(evaluation_key(m) for m in history)  # best, across the retry too
    assert isinstance(load_policy(t["checkpoint"]), MLPPolicy)
    assert manifest.done()[0]["checkpoint"] == t["checkpoint"]
    # a rerun on the same folder keeps the done teacher (no new attempt)
    assert run_teachers(cfg, tmp_path, flaky).teachers[0]["attempts"] == 2


def test_teachers_train_as_populations_each_on_its_own_quadrotor(tmp_path):
    """``teacher.population=2``: three teachers as two populations (2 + 1) in one process each; every teacher's
    actor is its own member's best, evaluated on its own quadrotor; a rerun keeps them."""
    cfg = tiny_config(teachers=3, steps=1000, teacher={"population": 2})
    manifest = run_teachers(cfg, tmp_path)
    teachers = json.loads((tmp_path / "manifest.json").read_text())["teachers"]
    assert [t["status"] for t in teachers] == ["done"] * 3
    assert [Path(t["population"]).name for t in teachers] == ["0000", "0000", "0002"]
    for t in teachers:
        assert isinstance(load_policy(t["checkpoint"]), MLPPolicy) and "final_median_position_error" in t["score"]
        member = Path(t["checkpoint"]).parents[2]
        assert json.loads((member / "robot.json").read_text())["mass"] == pytest.approx(t["mass"])
    assert len({t["checkpoint"] for t in teachers}) == 3 and manifest.done() == manifest.teachers
    again = run_teachers(cfg, tmp_path)
    assert [t["attempts"] for t in again.teachers] == [1, 1, 1]


def test_a_teacher_that_keeps_failing_is_recorded_not_lost(tmp_path, ray_local):
    cfg = tiny_config(teachers=1)

    def broken(spec: dict) -> dict:
        raise RuntimeError("motor model exploded")

    with pytest.raises(RuntimeError, match=r"teachers \[0\] failed after 2 attempts"):
        run_teachers(cfg, tmp_path, broken)
    t = Manifest.open(tmp_path / "manifest.json", teacher_specs(cfg, tmp_path)).teachers[0]
    assert t["status"] == "failed" and t["attempts"] == 2 and "motor model exploded" in t["error"]
    with pytest.raises(ValueError, match="other quadrotors"):
        run_teachers(tiny_config(teachers=1, seed=9), tmp_path, broken)


# End to end ---------------------------------------------------------------------------------------
@pytest.mark.slow
def test_two_teacher_pipeline_student_hovers_better_than_untrained(tmp_path, ray_local):
    """Minutes, not seconds: a TD3 teacher needs ~100k env steps before it stops crashing (a
    few-thousand-step teacher crashes as fast as an untrained student, so nothing could be learnt)."""
    torch.manual_seed(0)
    cfg = tiny_config(teachers=2, steps=150_000, ray={"num_cpus": 2})
    summary = run_pipeline(cfg, tmp_path)
    rows = json.loads((tmp_path / "eval.json").read_text())
    student, untrained = rows["student (GRU)"], rows["untrained GRU"]
    assert student["hover_mean_error_m"] < 0.7 * untrained["hover_mean_error_m"], rows
    assert student["hover_crash_rate"] <= untrained["hover_crash_rate"]
    assert summary["teachers_done"] == 2 and summary["teacher_wall_s_mean"] > 0
    policy = load_policy(tmp_path / "students" / "gru")  # saved as a robo policy, reloads identically
    again = evaluate_policy(policy, held_out_quadrotors(cfg), cfg.eval)
    assert again["hover_mean_error_m"] == pytest.approx(student["hover_mean_error_m"], rel=1e-5)
    assert (tmp_path / "students" / "mlp" / "config.json").exists() and (tmp_path / "eval.md").exists()


def test_untrained_students_are_real_policies():
    p = as_policy(make_student("gru", DaggerConfig()))
    a = p.act(np.zeros((3, 22), np.float32))
    assert a.shape == (3, 4) and np.all(np.abs(a) <= 1)
    assert sum(x.numel() for x in p.model.parameters()) == 2084  # the size the issue quotes for RAPTOR
    wide = make_student("gru", DaggerConfig(gru_hidden=32))
    assert wide.config.hidden_dim == 32 and wide.gru.hidden_size == 32
    with pytest.raises(ValueError, match="unknown student"):
        make_student("transformer", DaggerConfig())


def test_evaluate_policy_reports_every_metric():
    quads = sample_quadrotors({"base": "crazyflie"}, 2, seed=7)
    e = HeldOutConfig(quadrotors=2, starts=2, hover_seconds=0.5, figure_eight_seconds=0.5, push_at=0.1)
    m = evaluate_policy(as_policy(make_student("mlp", DaggerConfig())), quads, e)
    for k in ("hover_success_rate", "hover_crash_rate", "figure_eight_crash_rate", "push_recovery_rate"):
        assert 0.0 <= m[k] <= 1.0, (k, m[k])
    assert 0.0 < m["hover_mean_error_m"] <= 2.0 and "figure_eight_rmse_m" in m and "push_max_deviation_m" in m


def test_yaml_config_mirrors_the_dataclass():
    assert FoundationRunConfig.from_overrides([]) == FoundationRunConfig()
    assert FoundationRunConfig.from_dict(composed_dict("foundation")) == FoundationRunConfig()
    c = FoundationRunConfig.from_overrides(["teachers=64", "ray.address=auto",
                                            "dagger.tasks=[{},{name: figure_eight, figure_eight_period: 8.0}]"])
    assert c.teachers == 64 and c.ray.address == "auto"
    assert c.dagger.tasks == [{}, {"name": "figure_eight", "figure_eight_period": 8.0}]


def test_the_tracking_preset_changes_only_the_students_recipe():
    """``+experiment=foundation_tracking`` sets the measured tracking recipe and nothing else."""
    c = FoundationRunConfig.from_overrides(["+experiment=foundation_tracking", "teachers=4"])
    default = FoundationRunConfig()
    assert c.teachers == 4 and c.teacher == default.teacher and c.eval == default.eval
    assert c.randomization == default.randomization and c.ray == default.ray
    assert (c.dagger.gru_hidden, c.dagger.label_feedforward) == (32, 0.05)
    assert (c.dagger.validation_quadrotors, c.dagger.validation_figure_eight) == (16, True)
    assert (c.dagger.ensemble, c.dagger.refine_quadrotors, c.dagger.refine_feedforward) == (4, 384, 0.01)
    assert c.dagger.refine_trim and c.dagger.restarts == 1
    *hover, fig8 = c.dagger.tasks
    assert hover == [{}, {}, {}] and fig8["name"] == "figure_eight"
    assert fig8["figure_eight_randomization"]["amplitude"] == [0.5, 1.5]
    assert dataclasses.replace(c.dagger, gru_hidden=16, label_feedforward=0.0, tasks=[{}], validation_quadrotors=0,
                               validation_figure_eight=False, ensemble=1, refine_quadrotors=192,
                               refine_feedforward=0.0, refine_trim=False) == default.dagger


def test_teachers_of_several_runs_pool_by_mass(tmp_path):
    """``Manifest.pooled``: the done teachers of two runs (e.g. two seeds), sorted by mass, so
    ``load_teachers(count)`` still spreads a subset over the whole mass range."""
    from robo.foundation.pipeline import load_teachers

    runs = []
    for name, masses in (("a", [0.03, 1.0]), ("b", [0.5, 2.0])):
        m = Manifest(tmp_path / name / "manifest.json", [{"index": i, "mass": x, "status": "done"}
                                                         for i, x in enumerate(masses)])
        m.teachers.append({"index": 2, "mass": 0.1, "status": "failed"})
        m.save()
        runs.append(Manifest.load(m.path))
    pool = Manifest.pooled(runs)
    assert [t["mass"] for t in pool.done()] == [0.03, 0.5, 1.0, 2.0]
    with pytest.raises(FileNotFoundError, match="no teacher manifest"):
        Manifest.load(tmp_path / "c" / "manifest.json")
    with pytest.raises(ValueError, match="asked for 5 teachers, 4 are done"):
        load_teachers(pool, 5)


def test_teachers_start_from_another_run_s_teachers_of_the_same_quadrotors(tmp_path):
    """``teacher.init_from``: teacher i starts from the other run's teacher i, which must fly the same quadrotor."""
    hover = FoundationRunConfig.from_dict({"teachers": 3, "seed": 0})
    Manifest.open(tmp_path / "hover" / "manifest.json", teacher_specs(hover, tmp_path / "hover"))
    tuned = FoundationRunConfig.from_dict({"teachers": 3, "seed": 0,
                                           "teacher": {"init_from": str(tmp_path / "hover")}})
    specs = teacher_specs(tuned, tmp_path / "tuned")
    assert [s["config"]["init_from"] for s in specs] == [
        str((tmp_path / "hover" / "teachers" / f"{i:04d}" / "checkpoints" / "latest").resolve()) for i in range(3)]
    other = FoundationRunConfig.from_dict({"teachers": 3, "seed": 1, "teacher": {"init_from": str(tmp_path / "hover")}})
    with pytest.raises(ValueError, match="has no teacher 0 for the same quadrotor"):
        teacher_specs(other, tmp_path / "other")
