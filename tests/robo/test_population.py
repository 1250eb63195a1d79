"""Population training (``robo train population=N``): N SAC learners stacked into batched calls, each learning from
its own data only, each exported as a single run's actor is, and a run that checkpoints and resumes."""

import json

import numpy as np
import pytest
import torch

from robo.cli import main
from robo.rl.population import PopulationReplay, PopulationSAC, PopulationSACConfig

CONFIG = PopulationSACConfig(obs_dim=36, actor_obs_dim=22, batch_size=8, hover_action=0.1)


def batch(n: int, g: torch.Generator, b: int = 8):
    return (torch.randn(n, b, 36, generator=g), torch.rand(n, b, 4, generator=g) * 2 - 1,
            torch.randn(n, b, 1, generator=g), torch.randn(n, b, 36, generator=g),
            (torch.rand(n, b, 1, generator=g) < 0.2).float())


def member_grads(sac: PopulationSAC, data, m: int) -> list[torch.Tensor]:
    sac.noise.manual_seed(0)
    loss, _ = sac.loss(*data)
    sac.optimizer.zero_grad()
    loss.backward()
    return [p.grad[m].clone() if p.dim() > 1 else p.grad[m:m + 1].clone() for p in sac.parameters()[:-1]] + \
        [sac.log_ent_coef.grad[m:m + 1].clone()]


def test_a_member_learns_from_its_own_minibatch_only():
    sac = PopulationSAC(CONFIG, seeds=[0, 1, 2])
    data, fresh = batch(3, torch.Generator().manual_seed(0)), batch(3, torch.Generator().manual_seed(1))
    before = member_grads(sac, data, 0)
    others_changed = tuple(torch.cat([x[:1], y[1:]]) for x, y in zip(data, fresh))
    assert all(torch.equal(a, b) for a, b in zip(before, member_grads(sac, others_changed, 0)))
    own_changed = tuple(torch.cat([y[:1], x[1:]]) for x, y in zip(data, fresh))
    assert not all(torch.equal(a, b) for a, b in zip(before, member_grads(sac, own_changed, 0)))


def test_members_start_apart_and_each_exports_its_own_actor():
    sac = PopulationSAC(CONFIG, seeds=[0, 1])
    obs = torch.randn(2, 5, 36)
    stacked = sac.deterministic(obs)
    for m in range(2):
        np.testing.assert_allclose(sac.member_policy(m).act(obs[m, :, :22]).numpy(), stacked[m].numpy(), atol=1e-6)
    assert not torch.allclose(stacked[0], stacked[1])
    # the actor starts at the hover command, as init_at_hover starts a single run's
    np.testing.assert_allclose(sac.head[1][:, 0, :4].detach(), np.arctanh(0.1), rtol=1e-6)


def test_the_same_seeds_give_the_same_members():
    a, b = PopulationSAC(CONFIG, seeds=[3, 4]), PopulationSAC(CONFIG, seeds=[4])
    assert torch.equal(a.actor[0][0][1], b.actor[0][0][0]) and torch.equal(a.critics[0][0][3], b.critics[0][0][1])


def test_replay_keeps_each_members_rows_and_round_trips_oldest_first():
    replay = PopulationReplay(2, capacity=5, obs_dim=1, action_dim=1)
    for step in range(4):  # 2 envs a step: 8 rows into 5, the oldest 3 replaced
        v = torch.tensor([[[10.0 * m + 2 * step], [10.0 * m + 2 * step + 1]] for m in range(2)])
        replay.add(v, v, v, v[..., 0], torch.zeros(2, 2))
    obs = replay.sample(3, 50, torch.Generator().manual_seed(0))[0]
    assert set(obs[:, 0].flatten().tolist()) == {3.0, 4.0, 5.0, 6.0, 7.0}
    assert set(obs[:, 1].flatten().tolist()) == {13.0, 14.0, 15.0, 16.0, 17.0}
    state = replay.state_dict()
    assert state["obs"][0, :, 0].tolist() == [3.0, 4.0, 5.0, 6.0, 7.0]
    again = PopulationReplay(2, capacity=8, obs_dim=1, action_dim=1)
    again.load_state_dict(state)
    assert again.size == 5 and again.state_dict()["obs"][1, :, 0].tolist() == [13.0, 14.0, 15.0, 16.0, 17.0]


def test_cli_trains_a_population_checkpoints_and_resumes(tmp_path):
    run = tmp_path / "pop"
    args = ["train", "+experiment=hover_quick", "population=2", "num_envs=8", "eval_every=1000",
            "checkpoint_every=1000", "eval.num_envs=16", "video.enabled=false", f"hydra.run.dir={run}"]
    main([*args, "total_steps=2000"])
    first = json.loads((run / "population.json").read_text())
    assert first["population"] == 2 and first["env_steps_per_member"] == 2000
    assert [m["seed"] for m in first["members"]] == [0, 1]
    for m in ("000", "001"):
        assert (run / "members" / m / "checkpoints" / "best" / "policy").is_dir()
        assert len(json.loads((run / "members" / m / "eval_history.json").read_text())) == 2
    main(["train", f"resume={run}", "total_steps=3000"])
    again = json.loads((run / "population.json").read_text())
    assert again["env_steps_per_member"] == 3000
    assert [h["step"] for h in json.loads((run / "members" / "001" / "eval_history.json").read_text())] == \
        [1000, 2000, 3000]


def test_population_settings_it_cannot_honour_get_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["train", "population=2", "algo=td3", f"hydra.run.dir={tmp_path / 'a'}"])
    assert "population=2 trains SAC members: give algo=sac_fast (or sac), not td3" in capsys.readouterr().err


def test_members_can_each_fly_a_quadrotor_of_their_own(tmp_path):
    run = tmp_path / "pop"
    family = "{base: crazyflie, mass: [0.02, 3.0], thrust_to_weight: [1.5, 5.0]}"
    main(["train", "+experiment=hover_quick", "population=3", "num_envs=4", "total_steps=400", "eval_every=400",
          "eval.num_envs=8", "video.enabled=false", f"population_airframes={family}", f"hydra.run.dir={run}"])
    summary = json.loads((run / "population.json").read_text())
    masses = [m["mass_kg"] for m in summary["members"]]
    assert masses == sorted(masses) and len(set(masses)) == 3 and 0.02 <= masses[0] and masses[-1] <= 3.0
    robots = [json.loads((run / "members" / f"{m:03d}" / "robot.json").read_text()) for m in range(3)]
    assert [r["mass"] for r in robots] == masses


def test_each_members_envs_fly_its_quadrotor_and_its_actor_starts_at_its_hover(tmp_path):
    from robo.foundation.config import composed
    from robo.rl.population_trainer import PopulationTrainer

    c = composed("train", ["+experiment=hover_quick", "population=3", "num_envs=4",
                           "population_airframes={base: crazyflie, mass: [0.02, 3.0]}"])
    trainer = PopulationTrainer(c, tmp_path)
    mass = trainer.task.sim.params.mass.reshape(3, 4)
    assert torch.allclose(mass, torch.tensor([[q.mass] * 4 for q in trainer.robots], dtype=mass.dtype))
    hover = torch.tensor([q.hover_action for q in trainer.robots])
    assert torch.allclose(torch.tanh(trainer.sac.head[1][:, 0, :4]), hover[:, None].expand(3, 4), atol=1e-6)
