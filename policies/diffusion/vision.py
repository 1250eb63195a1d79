"""Image encoder for image observations: a small ResNet with GroupNorm (batch statistics break
EMA and small batches) and a spatial-softmax keypoint head, as Diffusion Policy uses, in plain
torch.nn (no torchvision, no pretrained weights)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn


def _groups(channels: int) -> int:
    return max(1, channels // 16)


class ResidualBlock(nn.Module):
    """Two 3x3 convs with GroupNorm; stride 2 halves H and W."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.norm1 = nn.GroupNorm(_groups(cout), cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.norm2 = nn.GroupNorm(_groups(cout), cout)
        self.skip = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.GroupNorm(_groups(cout), cout))
                     if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.norm1(self.conv1(x)))
        return F.relu(self.norm2(self.conv2(h)) + self.skip(x))


class SpatialSoftmax(nn.Module):
    """features (B, C, H, W) -> keypoints (B, 2 * num_kp): expected (x, y) in [-1, 1] of a softmax
    over each keypoint map (Levine et al. 2016)."""

    def __init__(self, channels: int, num_kp: int):
        super().__init__()
        self.proj = nn.Conv2d(channels, num_kp, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.proj(x)
        B, K, H, W = x.shape
        ys, xs = torch.meshgrid(torch.linspace(-1, 1, H, device=x.device), torch.linspace(-1, 1, W, device=x.device),
                                indexing="ij")
        attn = torch.softmax(x.reshape(B, K, H * W), dim=-1)
        grid = torch.stack([xs.reshape(-1), ys.reshape(-1)], dim=-1)  # (H*W, 2)
        return (attn @ grid).reshape(B, 2 * K)


def crop_images(image: torch.Tensor, size: tuple[int, int], random: bool) -> torch.Tensor:
    """image (B, C, H, W) -> (B, C, h, w) for ``size`` (h, w): each image's own uniformly drawn window when
    ``random`` (torch's global generator, as dropout), else the centre window."""
    b, _, height, width = image.shape
    h, w = size
    if not random:
        top, left = (height - h) // 2, (width - w) // 2
        return image[:, :, top:top + h, left:left + w]
    top = torch.randint(0, height - h + 1, (b, 1, 1), device=image.device)
    left = torch.randint(0, width - w + 1, (b, 1, 1), device=image.device)
    rows = top + torch.arange(h, device=image.device)[None, :, None]  # (B, h, 1)
    cols = left + torch.arange(w, device=image.device)[None, None, :]  # (B, 1, w)
    return image[torch.arange(b, device=image.device)[:, None, None], :, rows, cols].permute(0, 3, 1, 2)


class ImageEncoder(nn.Module):
    """image (B, 3, H, W) float in [0, 1] -> features (B, feature_dim).

    The stem (5x5 conv, stride 2) halves H and W; ``stem_pool`` adds ResNet-18's 3x3 max-pool of stride 2 after it, so
    the residual blocks see a quarter of the pixels (about 3x cheaper to train at 96x96 on a CPU). ``crop`` (h, w):
    in training mode each image is a random (h, w) window of itself, in eval mode its centre window (Diffusion
    Policy's crop augmentation, 84 of 96 pixels)."""

    def __init__(self, channels: list[int], num_kp: int, feature_dim: int, stem_pool: bool = False,
                 crop: tuple[int, int] | None = None):
        super().__init__()
        self.crop = tuple(crop) if crop is not None else None
        c0 = channels[0]
        stem = [nn.Conv2d(3, c0, 5, 2, 2, bias=False), nn.GroupNorm(_groups(c0), c0), nn.ReLU()]
        self.stem = nn.Sequential(*stem, *([nn.MaxPool2d(3, 2, 1)] if stem_pool else []))
        blocks, cin = [], c0
        for i, c in enumerate(channels):
            blocks.append(ResidualBlock(cin, c, 1 if i == 0 else 2))
            cin = c
        self.blocks = nn.Sequential(*blocks)
        self.pool = SpatialSoftmax(cin, num_kp)
        self.out = nn.Sequential(nn.Linear(2 * num_kp, feature_dim), nn.ReLU())

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        if self.crop is not None:
            image = crop_images(image, self.crop, random=self.training)
        return self.out(self.pool(self.blocks(self.stem(image * 2.0 - 1.0))))


@dataclass
class ImageObservationConfig:
    """The observation half shared by the chunk policies' configs (diffusion, energy, implicit BC): a state of
    ``obs_dim`` floats per step (declared by each config) and, when ``image_shape`` is set, an image whose
    ``ImageEncoder`` features follow the normalized state, ``obs_feature_dim`` floats per step in all."""

    image_shape: list[int] | None = None  # (3, H, W) when the observation has an image (it comes from the data)
    encoder_channels: list[int] = field(default_factory=lambda: [32, 64, 128])  # image observations: ResNet widths,
    spatial_keypoints: int = 32  # spatial-softmax keypoints,
    image_feature_dim: int = 64  # and features per image, concatenated to the normalized state of each step
    encoder_stem_pool: bool = False  # a max-pool after the stem: the blocks see 1/4 of the pixels (~3x cheaper)
    image_crop: list[int] | None = None  # (h, w): train on random crops, act on the centre crop (None: whole image)

    @property
    def obs_feature_dim(self) -> int:
        """Width of one observation step as the policy's network sees it: the normalized state, then the image's
        features (``image_feature_dim``) for image observations."""
        return self.obs_dim + (self.image_feature_dim if self.image_shape is not None else 0)

    def validate_image(self) -> None:
        """Check (and make plain ints of) the image fields; nothing to check without ``image_shape``."""
        if self.image_shape is None:
            return
        self.image_shape = [int(s) for s in self.image_shape]
        self.encoder_channels = [int(c) for c in self.encoder_channels]
        if len(self.image_shape) != 3 or self.image_shape[0] != 3 or min(self.image_shape) < 1:
            raise ValueError(f"image_shape must be (3, H, W), got {self.image_shape}")
        if not self.encoder_channels or min(self.encoder_channels) < 1:
            raise ValueError(f"encoder_channels={self.encoder_channels} must list positive widths")
        if self.spatial_keypoints < 1 or self.image_feature_dim < 1:
            raise ValueError(f"spatial_keypoints={self.spatial_keypoints} and image_feature_dim="
                             f"{self.image_feature_dim} must be >= 1")
        if self.image_crop is not None:
            self.image_crop = [int(n) for n in self.image_crop]
            if len(self.image_crop) != 2 or not all(1 <= n <= m for n, m in zip(self.image_crop, self.image_shape[1:])):
                raise ValueError(f"image_crop={self.image_crop} must be (h, w) within the image's "
                                 f"{self.image_shape[1:]}")


def image_encoder_for(config: ImageObservationConfig) -> ImageEncoder | None:
    """The encoder a chunk policy's config asks for, or None when its observations have no image."""
    if config.image_shape is None:
        return None
    return ImageEncoder(config.encoder_channels, config.spatial_keypoints, config.image_feature_dim,
                        config.encoder_stem_pool, config.image_crop)


def window_features(state_n: torch.Tensor, image: torch.Tensor | None, encoder: ImageEncoder | None) -> torch.Tensor:
    """state_n (B, T, obs_dim) normalized, image (B, T, 3, H, W) in [0, 1] -> (B, T, obs_dim + feature_dim): each
    step's state followed by its image's features (``state_n`` itself when ``encoder`` is None)."""
    if encoder is None:
        return state_n
    b, t = image.shape[:2]
    return torch.cat([state_n, encoder(image.flatten(0, 1)).reshape(b, t, -1)], dim=-1)
