"""Object-centric inputs and targets for planar manipulation dynamics.

Whether a pusher moves a block depends on where the pusher is *relative to the block, in the
block's frame*; an MLP fed world coordinates must learn that geometry anew at every block pose (on
push-T, with beta-NLL: holdout error 0.22 in world coordinates, 0.13 in the block frame). ``PlanarFrame`` hands the
model that geometry instead: the inputs gain sin/cos of the body's yaw, each tracked point (e.g.
the pusher) and a point-valued action (e.g. the pusher's target) in the body frame, and the action
relative to each point; the body's own position change is predicted in its frame at the start of
the step. Observations stay flat vectors; nothing task-specific is hard-coded here beyond which
indices hold what.

Conventions: positions in m, yaw in rad about +z (FLU), body frame rotated by yaw from the world.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def rotate(v: torch.Tensor, yaw: torch.Tensor, inverse: bool = False) -> torch.Tensor:
    """v (B, 2) rotated by yaw (B,), or by -yaw with ``inverse`` (world -> body)."""
    c, s = torch.cos(yaw), torch.sin(yaw)
    if inverse:
        s = -s
    return torch.stack([c * v[:, 0] - s * v[:, 1], s * v[:, 0] + c * v[:, 1]], dim=1)


@dataclass(frozen=True)
class PlanarFrame:
    """A planar body at ``obs[:, pose_dims]`` = (x, y, yaw); ``point_dims`` = flat (x, y) index
    pairs of other tracked points in obs; ``action_is_point``: the action is an (x, y) position."""

    pose_dims: tuple[int, int, int]
    point_dims: tuple[int, ...] = ()
    action_is_point: bool = False

    @property
    def points(self) -> list[tuple[int, int]]:
        return [(self.point_dims[i], self.point_dims[i + 1]) for i in range(0, len(self.point_dims), 2)]

    def feature_dim(self, obs_dim: int, action_dim: int) -> int:
        """obs without the yaw + sin, cos + action + 2 per point + (2 + 2 per point) for a point action."""
        n = len(self.points)
        return obs_dim - 1 + 2 + action_dim + 2 * n + (2 + 2 * n if self.action_is_point else 0)

    def features(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """obs (B, D), action (B, A) -> (B, feature_dim)."""
        x, y, yaw_i = self.pose_dims
        body, yaw = obs[:, [x, y]], obs[:, yaw_i]
        keep = [i for i in range(obs.shape[1]) if i != yaw_i]
        out = [obs[:, keep], torch.sin(yaw)[:, None], torch.cos(yaw)[:, None], action]
        for px, py in self.points:
            out.append(rotate(obs[:, [px, py]] - body, yaw, inverse=True))
        if self.action_is_point:
            out.append(rotate(action - body, yaw, inverse=True))
            out += [action - obs[:, [px, py]] for px, py in self.points]
        return torch.cat(out, dim=1)

    def to_body(self, obs: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
        """Observation change (B, D) with the body's position change rotated into its frame at ``obs``."""
        x, y, yaw_i = self.pose_dims
        out = delta.clone()
        out[:, [x, y]] = rotate(delta[:, [x, y]], obs[:, yaw_i], inverse=True)
        return out

    def to_world(self, obs: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
        """The inverse of ``to_body``."""
        x, y, yaw_i = self.pose_dims
        out = delta.clone()
        out[:, [x, y]] = rotate(delta[:, [x, y]], obs[:, yaw_i])
        return out
