"""Top-view rendering of push-T with OpenCV, in two styles.

- ``render_top_view``: robo's image, Diffusion Policy's colours, anti-aliased shapes drawn at the image's size.
- ``render_gym_pusht_view``: gym-pusht's drawing (``gym_pusht/envs/pusht.py`` and its ``pymunk_override``),
  redrawn with OpenCV: a 512 px canvas with the walls, the goal T, the block as a lighter fill inside a 4 px
  outline, the pusher as a disc with a lighter core, then ``cv2.resize`` (bilinear) to the image size.

Both are pure functions of the state, so images are deterministic; a 96 x 96 robo frame takes ~0.05 ms, far
less than MuJoCo's offscreen renderer (see ``benchmarks/pusht_env.py``). ``View`` maps robo's frame (m) onto
the image: the window ``[low, high]`` fills it, row 0 at the top (+y) edge, columns along +x, or along -x
when ``flip_x`` (gym-pusht's 512 px window is robo's frame turned by 180 degrees, see ``sims.pusht.gym_pusht``,
so its image is robo's mirrored left to right).
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from .geometry import t_rectangles, transform

BACKGROUND = (255, 255, 255)
GOAL = (144, 238, 144)     # light green
BLOCK = (119, 136, 153)    # light slate grey
AGENT = (65, 105, 225)     # royal blue
SHIFT = 4                  # fixed-point bits for sub-pixel polygon vertices
# gym-pusht's drawing: pygame colour names, its light_color (1.2 x, rounded, at most 255), sizes in canvas px
WALL = (211, 211, 211)              # LightGray
BLOCK_FILL = (143, 163, 184)        # light_color(LightSlateGray)
AGENT_CORE = (78, 126, 255)         # light_color(RoyalBlue)
GYM_CANVAS = 512                    # px, gym-pusht's window (1 px = 1 mm)
GYM_OUTLINE = 2                     # px, radius of the block's outline and of the wall segments
GYM_CORE_INSET = 4                  # px, the pusher's core is its radius minus this
GYM_WALL_CENTER = 2.0               # px, the wall segments' centre lines lie this far beyond the inner faces


@dataclass(frozen=True)
class View:
    """The window ``low`` (2,) .. ``high`` (2,) m of robo's frame that an image shows; ``flip_x``: columns
    run along -x."""

    low: tuple[float, float]
    high: tuple[float, float]
    flip_x: bool = False

    def to_pixels(self, points: np.ndarray, size: int) -> np.ndarray:
        """World xy (..., 2) m -> pixel (col, row) (..., 2) float of a size x size image."""
        (x0, y0), (x1, y1) = self.low, self.high
        x = x1 - points[..., 0] if self.flip_x else points[..., 0] - x0
        u = x / (x1 - x0) * size
        v = (y1 - points[..., 1]) / (y1 - y0) * size
        return np.stack([u, v], axis=-1)

    def scale(self, size: int) -> float:
        """px per m along x."""
        return size / (self.high[0] - self.low[0])


def to_pixels(points: np.ndarray, half_size: float, size: int) -> np.ndarray:
    """World xy (..., 2) m -> pixel (col, row) (..., 2) float of robo's view of [-h, h]^2; row 0: the +y edge."""
    return View((-half_size, -half_size), (half_size, half_size)).to_pixels(points, size)


def render_top_view(agent_xy: np.ndarray, block_pose: np.ndarray, goal_pose: np.ndarray, view: View,
                    agent_radius: float, size: int, walls=None) -> np.ndarray:
    """An RGB image (size, size, 3) uint8 of the goal T, the block T and the pusher, seen from above.

    agent_xy: (2,) m; block_pose, goal_pose: (3,) = (x m, y m, yaw rad); walls: not drawn in this style.
    """
    img = np.empty((size, size, 3), np.uint8)
    img[:] = BACKGROUND
    scale = float(1 << SHIFT)
    rects = t_rectangles()
    for pose, color in ((goal_pose, GOAL), (block_pose, BLOCK)):
        polys = [np.round(view.to_pixels(transform(r, pose), size) * scale).astype(np.int32) for r in rects]
        cv2.fillPoly(img, polys, color, lineType=cv2.LINE_AA, shift=SHIFT)
    center = np.round(view.to_pixels(np.asarray(agent_xy, float), size) * scale).astype(np.int32)
    radius = int(round(agent_radius * view.scale(size) * scale))
    cv2.circle(img, (int(center[0]), int(center[1])), radius, AGENT, -1, lineType=cv2.LINE_AA, shift=SHIFT)
    return img


def _fat_segment(img: np.ndarray, p: np.ndarray, q: np.ndarray, radius: int, color) -> None:
    """gym-pusht's ``draw_fat_segment``: a band of half width ``radius`` px between the rounded points p, q
    (2,) px, with discs on the ends."""
    p, q = np.round(p).astype(int), np.round(q).astype(int)
    orthog = np.abs([q[1] - p[1], q[0] - p[0]]).astype(float)
    if orthog.any():
        o = np.round(orthog * radius / np.hypot(*orthog)).astype(int)
        cv2.fillConvexPoly(img, np.array([p - o, p + o, q + o, q - o], np.int32), color)
    for end in (p, q):
        cv2.circle(img, (int(end[0]), int(end[1])), radius, color, -1)


def render_gym_pusht_view(agent_xy: np.ndarray, block_pose: np.ndarray, goal_pose: np.ndarray, view: View,
                          agent_radius: float, size: int, walls=None) -> np.ndarray:
    """gym-pusht's image (size, size, 3) uint8 of ``view``: its shapes and colours drawn on a 512 px canvas,
    then resized bilinearly as gym-pusht does. walls: ((x_min, y_min), (x_max, y_max)) m inner faces, or None.
    agent_xy: (2,) m; block_pose, goal_pose: (3,) = (x m, y m, yaw rad)."""
    n = GYM_CANVAS
    img = np.full((n, n, 3), BACKGROUND, np.uint8)
    px_per_m = view.scale(n)
    if walls is not None:
        off = GYM_WALL_CENTER / px_per_m
        (x0, y0), (x1, y1) = walls
        corners = view.to_pixels(np.array([[x0 - off, y0 - off], [x1 + off, y0 - off], [x1 + off, y1 + off],
                                           [x0 - off, y1 + off]]), n)
        for i in range(4):
            _fat_segment(img, corners[i], corners[(i + 1) % 4], GYM_OUTLINE, WALL)
    rects = t_rectangles()
    goal = [np.round(view.to_pixels(transform(r, goal_pose), n)).astype(np.int32) for r in rects]
    cv2.fillPoly(img, goal, GOAL)
    for r in rects:
        corners = view.to_pixels(transform(r, block_pose), n)
        cv2.fillPoly(img, [np.round(corners).astype(np.int32)], BLOCK_FILL)
        for i in range(4):
            _fat_segment(img, corners[i], corners[(i + 1) % 4], GYM_OUTLINE, BLOCK)
    c = np.round(view.to_pixels(np.asarray(agent_xy, float), n)).astype(int)
    radius = int(round(agent_radius * px_per_m))
    cv2.circle(img, (int(c[0]), int(c[1])), radius, AGENT, -1)
    cv2.circle(img, (int(c[0]), int(c[1])), radius - GYM_CORE_INSET, AGENT_CORE, -1)
    return cv2.resize(img, (size, size))
