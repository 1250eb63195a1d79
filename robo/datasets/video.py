"""MP4 video as LeRobot encodes it (AV1 by SVT-AV1, yuv420p, a key frame every 2 frames, crf 30), with PyAV.

    enc = VideoEncoder(path, fps=10, height=96, width=96)
    enc.add(frames)           # (T, H, W, 3) uint8 RGB; frame k of the file has timestamp k / fps
    enc.close()
    frames = decode_video(path)   # (N, H, W, 3) uint8 RGB, every frame of the file
"""

from __future__ import annotations

import os
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

CODEC, PIX_FMT, OPTIONS = "libsvtav1", "yuv420p", {"g": "2", "crf": "30", "preset": "12"}


class VideoEncoder:
    """Append RGB frames to one mp4 file; frame k is shown at k / fps s (pts k in a 1 / fps time base)."""

    def __init__(self, path: str | Path, fps: float, height: int, width: int):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        os.environ.setdefault("SVT_LOG", "1")  # SVT-AV1 prints errors only
        self.container = av.open(str(self.path), "w")
        rate = Fraction(fps).limit_denominator(1000)
        self.stream = self.container.add_stream(CODEC, rate=rate, options=OPTIONS)
        self.stream.width, self.stream.height, self.stream.pix_fmt = width, height, PIX_FMT
        self.stream.time_base = 1 / rate
        self.frames = 0

    def add(self, frames: np.ndarray) -> None:
        """frames: (T, H, W, 3) uint8 RGB."""
        for img in frames:
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(img), format="rgb24")
            frame.pts = self.frames
            self.frames += 1
            self.container.mux(self.stream.encode(frame))

    def close(self) -> None:
        self.container.mux(self.stream.encode())
        self.container.close()


def decode_video(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """Every frame of a video: (N, H, W, 3) uint8 RGB and its timestamps (N,) float64, s."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"video {path} is missing")
    frames, times = [], []
    with av.open(str(path)) as container:
        for frame in container.decode(video=0):
            frames.append(frame.to_ndarray(format="rgb24"))
            times.append(float(frame.pts * frame.time_base))
    return np.stack(frames), np.asarray(times)


def video_info(path: str | Path) -> dict:
    """meta/info.json's ``info`` of a video feature, as LeRobot writes it."""
    with av.open(str(path)) as container:
        s = container.streams.video[0]
        return {"video.height": s.height, "video.width": s.width, "video.codec": s.codec_context.codec.canonical_name,
                "video.pix_fmt": s.pix_fmt, "video.is_depth_map": False, "video.fps": int(s.base_rate),
                "video.channels": 3, "has_audio": bool(container.streams.audio)}
