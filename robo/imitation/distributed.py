"""Data-parallel imitation training under ``torchrun`` (PyTorch DistributedDataParallel).

``torchrun --nproc-per-node N -m robo train policy=...`` starts N processes with ``RANK``, ``LOCAL_RANK``,
``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` set (across machines: ``--nnodes`` and a rendezvous
endpoint). ``init_ranks`` joins them into one process group (NCCL on CUDA, gloo on the CPU); each rank
computes the loss on its own slice of one global batch (``rank_slice``) and DDP averages the gradients, so
the global batch is ``world_size * train.batch_size``, and N ranks take the same steps as one process on
the N-times larger batch. Rank 0 alone writes checkpoints, logs and evaluations.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn


@dataclass(frozen=True)
class Ranks:
    """This process's place among the training processes: ``rank`` of ``world`` (``local`` on its machine)."""

    rank: int = 0
    world: int = 1
    local: int = 0

    @property
    def main(self) -> bool:
        """True on the process that writes checkpoints, logs and evaluations."""
        return self.rank == 0

    @classmethod
    def from_env(cls) -> "Ranks":
        """The ranks torchrun sets in the environment (one process, rank 0, where it did not)."""
        def get(name: str, default: int) -> int:
            value = os.environ.get(name, "")
            return int(value) if value.strip() else default

        return cls(get("RANK", 0), get("WORLD_SIZE", 1), get("LOCAL_RANK", 0))


def init_ranks(device: torch.device) -> tuple[Ranks, torch.device]:
    """Join torchrun's process group (once) -> (ranks, this rank's device). A bare ``cuda`` device becomes
    ``cuda:<LOCAL_RANK>`` when several processes train: one GPU each."""
    ranks = Ranks.from_env()
    if ranks.world == 1:
        return ranks, device
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", ranks.local)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return ranks, device


def rank_slice(ids: torch.Tensor, ranks: Ranks) -> torch.Tensor:
    """This rank's part of a global batch of sample indices: ids (world * B,) -> (B,), the rank-th block."""
    if ranks.world == 1:
        return ids
    if len(ids) % ranks.world:
        raise ValueError(f"global batch {len(ids)} does not split over {ranks.world} ranks")
    return ids.view(ranks.world, -1)[ranks.rank]


class PolicyLoss(nn.Module):
    """``policy.compute_loss(batch)`` as a module over ``policy.model``, so that DDP can wrap it (the policy
    calls its model's parts, not ``model.forward``)."""

    def __init__(self, policy):
        super().__init__()
        self.model = policy.model
        self._compute = policy.compute_loss

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self._compute(batch)


def data_parallel(policy, ranks: Ranks, device: torch.device) -> nn.Module:
    """The loss module the trainer calls: ``PolicyLoss`` itself on one process, wrapped in DDP on several (which
    also copies rank 0's initial weights and buffers to every rank)."""
    loss = PolicyLoss(policy)
    if ranks.world == 1:
        return loss
    from torch.nn.parallel import DistributedDataParallel

    ids = [device.index] if device.type == "cuda" else None
    # some policies hold parameters their loss does not use (e.g. inference-only ones): DDP must not wait for them
    return DistributedDataParallel(loss, device_ids=ids, find_unused_parameters=True)


def barrier(ranks: Ranks) -> None:
    """Wait for every rank (no-op on one process)."""
    if ranks.world > 1 and dist.is_initialized():
        dist.barrier()
