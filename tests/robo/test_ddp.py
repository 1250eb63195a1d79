"""Data-parallel imitation training (robo.imitation.distributed): two gloo ranks on the CPU take the same steps
as one process on the doubled batch, save from rank 0 only and resume on every rank."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp
from safetensors.torch import load_file, save_file
from torch import nn

from robo.imitation import ImitationTrainer, TrainConfig
from robo.imitation.distributed import Ranks, rank_slice

OBS, ACT, TO, H = 3, 2, 2, 4


class Regression:
    """A tiny chunked 'policy' with a deterministic loss (a diffusion loss draws noise per sample, which two
    ranks cannot draw as one process does): an MLP from the observation window to the action chunk."""

    n_obs_steps, horizon, n_action_steps = TO, H, 2

    def __init__(self):
        torch.manual_seed(0)
        self.model = nn.Sequential(nn.Linear(TO * OBS, 16), nn.Tanh(), nn.Linear(16, H * ACT))

    def compute_loss(self, batch):
        return ((self.model(batch["obs"].flatten(1)) - batch["action"].flatten(1)) ** 2).mean()

    def save(self, directory):
        Path(directory).mkdir(parents=True, exist_ok=True)
        save_file({k: v.detach().cpu().contiguous() for k, v in self.model.state_dict().items()},
                  str(Path(directory) / "model.safetensors"))


class Table:
    """64 fixed windows; ``batch(ids)`` gathers them (as ``ChunkWindows`` does)."""

    def __init__(self):
        g = torch.Generator().manual_seed(1)
        self.obs, self.action = torch.randn(64, TO, OBS, generator=g), torch.randn(64, H, ACT, generator=g)

    def __len__(self):
        return 64

    def batch(self, ids):
        return {"obs": self.obs[ids], "action": self.action[ids]}


def config(steps: int, batch_size: int) -> TrainConfig:
    return TrainConfig(steps=steps, batch_size=batch_size, lr=1e-2, warmup_steps=0, lr_scheduler="constant",
                       log_every=1, checkpoint_every=3, seed=0)


def train(run_dir, batch_size: int) -> dict:
    """3 steps, then a resume to 6 (a new trainer reading checkpoints/latest); the final weights."""
    ImitationTrainer(Regression(), Table(), config(3, batch_size), run_dir).train(progress=False)
    policy = Regression()
    ImitationTrainer(policy, Table(), config(6, batch_size), run_dir).train(resume=True, progress=False)
    return {k: v.clone() for k, v in policy.model.state_dict().items()}


def rank_main(rank: int, port: int, out: str) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    torch.set_num_threads(1)
    weights = train(Path(out) / "run", batch_size=4)
    torch.save(weights, Path(out) / f"weights_{rank}.pt")
    torch.distributed.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_gloo_ranks_match_one_process_on_the_doubled_batch(tmp_path, monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    one = train(tmp_path / "one", batch_size=8)  # first: the forked ranks then start with its imports done
    mp.start_processes(rank_main, args=(free_port(), str(tmp_path)), nprocs=2, start_method="fork")
    ranks = [torch.load(tmp_path / f"weights_{r}.pt") for r in (0, 1)]
    for k in one:
        assert torch.equal(ranks[0][k], ranks[1][k])  # DDP keeps the ranks in step
        torch.testing.assert_close(ranks[0][k], one[k], rtol=1e-5, atol=1e-6)
    assert not torch.allclose(one["0.weight"], Regression().model.state_dict()["0.weight"])  # it trained
    # rank 0 alone wrote the run folder: one log with every step, the resume's rows after the first three
    rows = (tmp_path / "run" / "train_log.csv").read_text().splitlines()
    assert [r.split(",")[0] for r in rows[1:]] == ["1", "2", "3", "4", "5", "6"]
    assert load_file(str(tmp_path / "run" / "checkpoints" / "latest" / "policy" / "model.safetensors"))


def test_each_rank_takes_its_own_block_of_the_global_batch():
    ids = torch.arange(8)
    assert rank_slice(ids, Ranks()).tolist() == list(range(8))
    assert rank_slice(ids, Ranks(rank=1, world=2)).tolist() == [4, 5, 6, 7]
    with pytest.raises(ValueError, match="global batch 8 does not split over 3 ranks"):
        rank_slice(ids, Ranks(rank=0, world=3))


TINY = ["policy=diffusion", "task=obstacle_reach", "demos=4", "policy.down_dims=[8,16]", "policy.horizon=8",
        "policy.n_action_steps=4", "policy.diffusion_step_embed_dim=8", "policy.train.steps=4",
        "policy.train.batch_size=4", "policy.train.warmup_steps=1", "policy.train.checkpoint_every=2",
        "task.eval.episodes=1", "task.eval.episodes_during_training=1", "video.enabled=false", "device=cpu"]


@pytest.mark.slow
def test_torchrun_trains_and_resumes_an_imitation_policy_from_the_cli(tmp_path):
    run = tmp_path / "run"
    env = {**os.environ, "MUJOCO_GL": "egl", "OMP_NUM_THREADS": "1"}
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "-m", "robo", "train"]
    r = subprocess.run([*torchrun, *TINY, f"hydra.run.dir={run}"], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("robo train: results") == 1  # rank 0 alone reports
    assert (run / "checkpoints" / "latest" / "policy" / "config.json").is_file()
    r = subprocess.run([*torchrun, "policy.train.steps=6", f"resume={run}"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert '"step": 6' in (run / "metrics.json").read_text()


def test_rl_training_refuses_torchrun(monkeypatch, tmp_path):
    from omegaconf import OmegaConf

    from robo.commands.train import run

    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match="RL training is one process"):
        run(OmegaConf.create({"policy": None, "task": {"name": "hover"}, "resume": None}), tmp_path)
