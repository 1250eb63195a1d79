"""Quaternion helpers over batches (torch). Quaternions are (w, x, y, z), Hamilton
convention, rotating body-frame vectors into the world frame."""

from __future__ import annotations

import math

import torch


def quat_to_rotmat(q: torch.Tensor) -> torch.Tensor:
    """(..., 4) unit quaternions -> (..., 3, 3) rotation matrices (body -> world)."""
    w, x, y, z = q.unbind(-1)
    xx, yy, zz = x * x, y * y, z * z
    xy, xz, yz = x * y, x * z, y * z
    wx, wy, wz = w * x, w * y, w * z
    rows = (
        1 - 2 * (yy + zz), 2 * (xy - wz), 2 * (xz + wy),
        2 * (xy + wz), 1 - 2 * (xx + zz), 2 * (yz - wx),
        2 * (xz - wy), 2 * (yz + wx), 1 - 2 * (xx + yy),
    )
    return torch.stack(rows, dim=-1).reshape(q.shape[:-1] + (3, 3))


def rotmat_to_quat(R: torch.Tensor) -> torch.Tensor:
    """(..., 3, 3) rotation matrices -> (..., 4) quaternions with w >= 0."""
    m = R
    t = m[..., 0, 0] + m[..., 1, 1] + m[..., 2, 2]
    cands = torch.stack([
        torch.stack([1 + t, m[..., 2, 1] - m[..., 1, 2], m[..., 0, 2] - m[..., 2, 0], m[..., 1, 0] - m[..., 0, 1]], -1),
        torch.stack([m[..., 2, 1] - m[..., 1, 2], 1 + m[..., 0, 0] - m[..., 1, 1] - m[..., 2, 2], m[..., 0, 1] + m[..., 1, 0], m[..., 0, 2] + m[..., 2, 0]], -1),
        torch.stack([m[..., 0, 2] - m[..., 2, 0], m[..., 0, 1] + m[..., 1, 0], 1 - m[..., 0, 0] + m[..., 1, 1] - m[..., 2, 2], m[..., 1, 2] + m[..., 2, 1]], -1),
        torch.stack([m[..., 1, 0] - m[..., 0, 1], m[..., 0, 2] + m[..., 2, 0], m[..., 1, 2] + m[..., 2, 1], 1 - m[..., 0, 0] - m[..., 1, 1] + m[..., 2, 2]], -1),
    ], -2)  # (..., 4, 4): candidate i is best when component i is largest
    diag = torch.stack([t, m[..., 0, 0], m[..., 1, 1], m[..., 2, 2]], -1)
    best = diag.argmax(-1)
    q = torch.gather(cands, -2, best[..., None, None].expand(best.shape + (1, 4))).squeeze(-2)
    q = q / q.norm(dim=-1, keepdim=True)
    return q * torch.where(q[..., :1] < 0, -1.0, 1.0)


def quat_mul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Hamilton product a * b of (..., 4) quaternions."""
    aw, ax, ay, az = a.unbind(-1)
    bw, bx, by, bz = b.unbind(-1)
    return torch.stack([
        aw * bw - ax * bx - ay * by - az * bz,
        aw * bx + ax * bw + ay * bz - az * by,
        aw * by - ax * bz + ay * bw + az * bx,
        aw * bz + ax * by - ay * bx + az * bw,
    ], -1)


def quat_rotate(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Rotate (..., 3) vectors by (..., 4) unit quaternions (body -> world)."""
    w = q[..., :1]
    u = q[..., 1:]
    t = 2 * torch.cross(u, v, dim=-1)
    return v + w * t + torch.cross(u, t, dim=-1)


def quat_from_axis_angle(axis: torch.Tensor, angle: torch.Tensor) -> torch.Tensor:
    """(..., 3) unit axes and (...) angles in rad -> (..., 4) quaternions."""
    half = 0.5 * angle
    return torch.cat([torch.cos(half)[..., None], torch.sin(half)[..., None] * axis], -1)


def quat_angle(q: torch.Tensor) -> torch.Tensor:
    """Rotation angle (rad, in [0, pi]) of (..., 4) unit quaternions."""
    return 2 * torch.acos(q[..., 0].abs().clamp(max=1.0))


def random_quat_within(angle_max: float, n: int, generator: torch.Generator, dtype=torch.float32) -> torch.Tensor:
    """(n, 4) rotations about uniformly random axes by angles uniform in [0, angle_max] rad."""
    if not 0 <= angle_max <= math.pi:
        raise ValueError(f"angle_max must lie in [0, pi] rad, got {angle_max}")
    axis = torch.randn(n, 3, generator=generator, dtype=dtype)
    axis = axis / axis.norm(dim=-1, keepdim=True).clamp(min=1e-9)
    angle = torch.rand(n, generator=generator, dtype=dtype) * angle_max
    return quat_from_axis_angle(axis, angle)
