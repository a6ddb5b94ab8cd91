"""Render the five example clips and their ground truth (examples/examples.json).

Only the entries of the "rendered" set are rewritten; the real-footage entries
(set "real", clips copied in with their credits, see examples/ATTRIBUTION.md)
are kept first, as they are.

Every clip is drawn procedurally with numpy (no randomness except seeded star
positions) and encoded with PyAV's libx264 (yuv420p, single thread, faststart),
so re-running rewrites the same pictures. Each clip is defined by ONE timeline
(a list of phases); the drawing code and the ground truth (events and query
spans) are both derived from it, so they cannot drift apart.

Run from anywhere: ``python examples/render_examples.py``.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

OUT_DIR = Path(__file__).resolve().parent
FPS = 10
W, H = 480, 270
CRF = 20
SET = "rendered"
CREDIT = {
    "source": "examples/render_examples.py: drawn procedurally for marlin-demo",
    "author": "marlin-demo",
    "license": "same as this repository",
    "changes": "none",
}

Color = tuple[float, float, float]


# ---------------------------------------------------------------------------
# Timeline
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Phase:
    key: str
    start: float
    end: float
    description: str


@dataclass
class Clip:
    video: str
    title: str
    scene: str
    phases: list[Phase]
    # (query text, first phase key, last phase key): the span runs from the first phase's start
    # to the last phase's end.
    queries: list[tuple[str, str, str]]
    draw: Callable[[Clip, float], np.ndarray] = field(repr=False, default=None)  # type: ignore[assignment]

    @property
    def duration(self) -> float:
        return self.phases[-1].end

    def phase(self, key: str) -> Phase:
        return next(p for p in self.phases if p.key == key)

    def at(self, t: float) -> tuple[Phase, float]:
        """The phase shown at time t and the progress through it (0..1)."""
        for p in self.phases:
            if p.start <= t < p.end:
                return p, (t - p.start) / (p.end - p.start)
        last = self.phases[-1]
        return last, 1.0

    def ground_truth(self) -> dict:
        return {
            "video": self.video,
            "set": SET,
            "title": self.title,
            "duration": self.duration,
            "fps": FPS,
            "width": W,
            "height": H,
            "scene": self.scene,
            "events": [{"start": p.start, "end": p.end, "description": p.description} for p in self.phases],
            "queries": [
                {"query": q, "span": [self.phase(a).start, self.phase(b).end]} for q, a, b in self.queries
            ],
            "credit": dict(CREDIT),
        }


# ---------------------------------------------------------------------------
# Drawing helpers (anti-aliased, float RGB 0..1 canvas of shape H x W x 3)
# ---------------------------------------------------------------------------

YY, XX = np.mgrid[0:H, 0:W].astype(np.float32) + 0.5


def canvas(color: Color) -> np.ndarray:
    img = np.empty((H, W, 3), np.float32)
    img[:] = color
    return img


def _box(x0: float, y0: float, x1: float, y1: float) -> tuple[slice, slice] | None:
    """Pixel slices covering a float box (clipped to the frame), or None when it is off-frame."""
    c0, c1 = max(0, math.floor(x0) - 1), min(W, math.ceil(x1) + 1)
    r0, r1 = max(0, math.floor(y0) - 1), min(H, math.ceil(y1) + 1)
    if c0 >= c1 or r0 >= r1:
        return None
    return slice(r0, r1), slice(c0, c1)


def _dist(dx: np.ndarray, dy: np.ndarray) -> np.ndarray:
    # Only + * and sqrt (correctly rounded everywhere): np.hypot / np.exp have SIMD and scalar code
    # paths whose last bits depend on memory alignment, which made re-runs encode differently.
    return np.sqrt(dx * dx + dy * dy)


def blend(img: np.ndarray, box: tuple[slice, slice], alpha: np.ndarray, color: Color) -> None:
    a = np.clip(alpha, 0.0, 1.0)[..., None]
    region = img[box]
    region[:] = region * (1 - a) + np.asarray(color, np.float32) * a


def vgradient(img: np.ndarray, y0: float, y1: float, top: Color, bottom: Color) -> None:
    t = np.clip((YY[:, :1] - y0) / max(y1 - y0, 1e-6), 0, 1)[..., None]
    grad = np.asarray(top, np.float32) * (1 - t) + np.asarray(bottom, np.float32) * t
    mask = ((YY[:, :1] >= y0) & (YY[:, :1] < y1))[..., None]
    img[:] = np.where(mask, grad, img)


def rect(img: np.ndarray, x0: float, y0: float, x1: float, y1: float, color: Color) -> None:
    box = _box(x0, y0, x1, y1)
    if box is None:
        return
    xx, yy = XX[box], YY[box]
    ax = np.clip(np.minimum(xx - x0 + 0.5, x1 - xx + 0.5), 0, 1)
    ay = np.clip(np.minimum(yy - y0 + 0.5, y1 - yy + 0.5), 0, 1)
    blend(img, box, ax * ay, color)


def circle(img: np.ndarray, cx: float, cy: float, r: float, color: Color, alpha: float = 1.0) -> None:
    box = _box(cx - r, cy - r, cx + r, cy + r)
    if box is None:
        return
    d = _dist(XX[box] - cx, YY[box] - cy)
    blend(img, box, np.clip(r - d + 0.5, 0, 1) * alpha, color)


def ellipse(
    img: np.ndarray, cx: float, cy: float, rx: float, ry: float, color: Color, alpha: float = 1.0
) -> None:
    box = _box(cx - rx, cy - ry, cx + rx, cy + ry)
    if box is None:
        return
    q = _dist((XX[box] - cx) / rx, (YY[box] - cy) / ry)
    blend(img, box, np.clip((1.0 - q) * min(rx, ry) + 0.5, 0, 1) * alpha, color)


def glow(img: np.ndarray, cx: float, cy: float, r: float, color: Color, strength: float) -> None:
    box = _box(cx - 5 * r, cy - 5 * r, cx + 5 * r, cy + 5 * r)
    if box is None:
        return
    q = ((XX[box] - cx) ** 2 + (YY[box] - cy) ** 2) / (r * r)
    blend(img, box, strength / (1.0 + q) ** 2, color)


def line(img: np.ndarray, x0: float, y0: float, x1: float, y1: float, width: float, color: Color) -> None:
    box = _box(min(x0, x1) - width, min(y0, y1) - width, max(x0, x1) + width, max(y0, y1) + width)
    if box is None:
        return
    xx, yy = XX[box], YY[box]
    dx, dy = x1 - x0, y1 - y0
    length2 = dx * dx + dy * dy or 1e-6
    t = np.clip(((xx - x0) * dx + (yy - y0) * dy) / length2, 0, 1)
    d = _dist(xx - (x0 + t * dx), yy - (y0 + t * dy))
    blend(img, box, np.clip(width / 2 - d + 0.5, 0, 1), color)


def smooth(u: float) -> float:
    u = min(max(u, 0.0), 1.0)
    return u * u * (3 - 2 * u)


# ---------------------------------------------------------------------------
# Clip 1: a red ball rolls across a green field
# ---------------------------------------------------------------------------

BALL_R = 22.0
BALL_LEFT, BALL_RIGHT = 70.0, 410.0
GROUND_Y = 200.0


def draw_ball(clip: Clip, t: float) -> np.ndarray:
    img = canvas((0.55, 0.78, 0.95))
    vgradient(img, 0, 150, (0.45, 0.70, 0.95), (0.75, 0.88, 0.98))
    circle(img, 405, 45, 22, (1.0, 0.88, 0.3))
    rect(img, 0, 150, W, H, (0.30, 0.62, 0.25))
    for i, y in enumerate(range(160, H, 22)):
        rect(img, 0, y, W, y + 8, (0.27, 0.57, 0.22) if i % 2 else (0.33, 0.66, 0.28))
    phase, u = clip.at(t)
    if phase.key == "rest_left":
        x = BALL_LEFT
    elif phase.key == "roll":
        x = BALL_LEFT + (BALL_RIGHT - BALL_LEFT) * u
    else:
        x = BALL_RIGHT
    cy = GROUND_Y - BALL_R
    # Soft shadow, ball, and a white spot that turns with the distance rolled.
    ellipse(img, x + 3, GROUND_Y, BALL_R * 0.9, 4, (0.12, 0.30, 0.10), alpha=0.6)
    circle(img, x, cy, BALL_R, (0.86, 0.12, 0.10))
    angle = (x - BALL_LEFT) / BALL_R
    circle(img, x + 0.55 * BALL_R * math.sin(angle), cy - 0.55 * BALL_R * math.cos(angle), 5, (1, 1, 1))
    return img


BALL = Clip(
    video="ball_rolls.mp4",
    title="A red ball rolls across a field",
    scene=(
        "A simple animated outdoor scene: a bright red ball lies on a striped green grass field under a "
        "light blue sky with a yellow sun in the upper right corner. The ball rests on the left side, "
        "rolls smoothly to the right side of the field and comes to a stop there."
    ),
    phases=[
        Phase("rest_left", 0.0, 2.0, "A red ball rests on the left side of a green field."),
        Phase("roll", 2.0, 8.0, "The red ball rolls from the left to the right across the field."),
        Phase("rest_right", 8.0, 12.0, "The ball stops and stays still on the right side of the field."),
    ],
    queries=[
        ("the red ball rolls across the field", "roll", "roll"),
        ("the ball has stopped on the right side", "rest_right", "rest_right"),
    ],
    draw=draw_ball,
)


# ---------------------------------------------------------------------------
# Clip 2: a blue square enters, waits, and leaves
# ---------------------------------------------------------------------------

SQ = 80.0


def draw_square(clip: Clip, t: float) -> np.ndarray:
    img = canvas((0.93, 0.89, 0.80))
    rect(img, 0, 210, W, H, (0.62, 0.50, 0.38))
    rect(img, 0, 206, W, 210, (0.45, 0.35, 0.27))
    center = (W - SQ) / 2
    phase, u = clip.at(t)
    x: float | None
    if phase.key == "enter":
        x = -SQ + (center + SQ) * smooth(u)
    elif phase.key == "stay":
        x = center
    elif phase.key == "leave":
        x = center + (W - center) * smooth(u)
    else:
        x = None
    if x is not None:
        rect(img, x + 6, 206 - 4, x + SQ + 6, 208, (0.50, 0.42, 0.33))  # shadow on the floor
        rect(img, x, 206 - SQ, x + SQ, 206, (0.12, 0.30, 0.85))
    return img


SQUARE = Clip(
    video="blue_square.mp4",
    title="A blue square comes and goes",
    scene=(
        "A plain beige wall above a brown floor, seen straight on. The room starts empty; a blue square "
        "slides in from the left, waits in the middle of the floor, then slides out to the right, "
        "leaving the room empty again."
    ),
    phases=[
        Phase("empty_start", 0.0, 2.0, "An empty room with a beige wall and a brown floor."),
        Phase("enter", 2.0, 4.0, "A blue square slides in from the left edge to the center."),
        Phase("stay", 4.0, 7.0, "The blue square stays still in the middle of the floor."),
        Phase("leave", 7.0, 9.0, "The blue square slides to the right and leaves the frame."),
        Phase("empty_end", 9.0, 10.0, "The room is empty again."),
    ],
    queries=[
        ("the blue square enters from the left", "enter", "enter"),
        ("the blue square leaves the frame", "leave", "leave"),
        ("the blue square is visible", "enter", "leave"),
    ],
    draw=draw_square,
)


# ---------------------------------------------------------------------------
# Clip 3: two people walk toward each other, meet, and walk off together
# ---------------------------------------------------------------------------

FEET_Y = 225.0
A_COLOR: Color = (0.95, 0.55, 0.10)  # orange shirt
B_COLOR: Color = (0.50, 0.25, 0.70)  # purple shirt
A_START, B_START = 40.0, 440.0
A_MEET, B_MEET = 215.0, 265.0


def person(
    img: np.ndarray, x: float, color: Color, walk: float, facing: int, arm_forward: float = 0.0
) -> None:
    """A stick person with a coloured body; ``walk`` is the gait phase, 0 means standing."""
    skin: Color = (0.95, 0.80, 0.65)
    dark: Color = (0.15, 0.15, 0.20)
    hip_y, neck_y, head_y = FEET_Y - 45, FEET_Y - 90, FEET_Y - 105
    swing = 0.45 * math.sin(walk) if walk else 0.0
    for s in (swing, -swing):  # legs
        line(img, x, hip_y, x + 45 * math.sin(s), hip_y + 45 * math.cos(s), 6, dark)
    line(img, x, hip_y, x, neck_y, 12, color)  # body
    line(img, x, neck_y + 6, x - facing * 30 * math.sin(swing), neck_y + 38, 5, color)  # back arm
    if arm_forward:
        line(img, x, neck_y + 6, x + facing * 34 * arm_forward, neck_y + 26, 5, color)
    else:
        line(img, x, neck_y + 6, x + facing * 30 * math.sin(swing), neck_y + 38, 5, color)
    circle(img, x, head_y, 13, skin)
    circle(img, x + facing * 5, head_y - 2, 2, dark)


def draw_people(clip: Clip, t: float) -> np.ndarray:
    img = canvas((0.80, 0.90, 0.98))
    vgradient(img, 0, 150, (0.60, 0.80, 0.97), (0.85, 0.93, 0.99))
    rect(img, 0, 150, W, 200, (0.72, 0.80, 0.62))  # lawn
    rect(img, 0, 200, W, H, (0.72, 0.72, 0.72))  # pavement
    for x in range(0, W, 60):
        rect(img, x, 200, x + 2, H, (0.62, 0.62, 0.62))
    phase, u = clip.at(t)
    step = 2 * math.pi * 1.5 * t
    if phase.key == "approach":
        person(img, A_START + (A_MEET - A_START) * u, A_COLOR, step, +1)
        person(img, B_START + (B_MEET - B_START) * u, B_COLOR, step + math.pi, -1)
    elif phase.key == "meet":
        shake = 0.85 + 0.1 * math.sin(2 * math.pi * 2 * t)
        person(img, A_MEET, A_COLOR, 0.0, +1, arm_forward=shake)
        person(img, B_MEET, B_COLOR, 0.0, -1, arm_forward=shake)
    elif phase.key == "leave":
        dx = (W + 80 - A_MEET) * u
        person(img, A_MEET + dx, A_COLOR, step, +1)
        person(img, B_MEET + dx, B_COLOR, step + math.pi, +1)
    return img


PEOPLE = Clip(
    video="people_meet.mp4",
    title="Two people meet",
    scene=(
        "A cartoon park path: a pale lawn and a grey paved sidewalk under a light blue sky. Two stick "
        "figures, one in an orange shirt on the left and one in a purple shirt on the right, walk toward "
        "each other, meet in the middle and shake hands, then walk off together to the right."
    ),
    phases=[
        Phase("approach", 0.0, 6.0, "Two people walk toward each other from opposite sides of the path."),
        Phase("meet", 6.0, 9.0, "The two people meet in the middle and shake hands."),
        Phase("leave", 9.0, 13.0, "Both people walk side by side to the right and leave the frame."),
        Phase("empty", 13.0, 14.0, "The path is empty."),
    ],
    queries=[
        ("two people walk toward each other", "approach", "approach"),
        ("the two people shake hands", "meet", "meet"),
        ("the people walk away together to the right", "leave", "leave"),
    ],
    draw=draw_people,
)


# ---------------------------------------------------------------------------
# Clip 4: a street by day, then by night
# ---------------------------------------------------------------------------

BUILDINGS = [(10, 70, 90), (95, 120, 70), (175, 60, 110), (245, 95, 80), (330, 140, 60), (400, 80, 75)]
STARS = np.random.default_rng(7).uniform((0, 0), (W, 90), size=(40, 2))
ROAD_Y = 200.0


def car(img: np.ndarray, x: float, color: Color, facing: int, lights: bool) -> None:
    body_y = ROAD_Y + 18
    rect(img, x - 45, body_y - 22, x + 45, body_y, color)
    rect(img, x - 25, body_y - 38, x + 20, body_y - 20, color)
    rect(
        img, x - 20, body_y - 34, x + 15, body_y - 22, (0.70, 0.85, 0.95) if not lights else (0.3, 0.3, 0.35)
    )
    for wx in (x - 28, x + 28):
        circle(img, wx, body_y + 2, 10, (0.10, 0.10, 0.10))
    if lights:
        front = x + facing * 45
        circle(img, front, body_y - 12, 5, (1.0, 0.97, 0.75))
        glow(img, front + facing * 40, body_y - 6, 45, (1.0, 0.95, 0.70), 0.55)


def draw_street(clip: Clip, t: float) -> np.ndarray:
    phase, u = clip.at(t)
    night = phase.key.startswith("night")
    img = canvas((0, 0, 0))
    if night:
        vgradient(img, 0, ROAD_Y, (0.02, 0.03, 0.12), (0.10, 0.10, 0.25))
        for sx, sy in STARS:
            circle(img, float(sx), float(sy), 1.2, (1, 1, 0.9))
        circle(img, 80, 45, 18, (0.95, 0.95, 0.85))
        circle(img, 88, 40, 16, (0.06, 0.07, 0.18))  # crescent
    else:
        vgradient(img, 0, ROAD_Y, (0.35, 0.62, 0.95), (0.75, 0.88, 0.98))
        circle(img, 80, 45, 20, (1.0, 0.90, 0.35))
    for i, (bx, bh, bw) in enumerate(BUILDINGS):
        top = ROAD_Y - bh
        wall = (0.20, 0.20, 0.26) if night else ((0.62, 0.58, 0.55) if i % 2 else (0.75, 0.68, 0.60))
        rect(img, bx, top, bx + bw, ROAD_Y, wall)
        for wy in np.arange(top + 10, ROAD_Y - 18, 22):
            for wx in np.arange(bx + 8, bx + bw - 14, 20):
                lit = night and (int(wx) * 7 + int(wy) * 3 + i) % 5 != 0
                window = (1.0, 0.85, 0.35) if lit else ((0.08, 0.08, 0.12) if night else (0.45, 0.60, 0.75))
                rect(img, wx, wy, wx + 10, wy + 12, window)
    rect(img, 0, ROAD_Y, W, H, (0.12, 0.12, 0.14) if night else (0.35, 0.35, 0.38))
    for x in range(10, W, 70):
        rect(img, x, ROAD_Y + 33, x + 35, ROAD_Y + 37, (0.6, 0.6, 0.5) if night else (0.95, 0.95, 0.85))
    if phase.key == "day_car":
        car(img, -60 + (W + 120) * u, (0.85, 0.15, 0.12), +1, lights=False)
    elif phase.key == "night_car":
        car(img, W + 60 - (W + 120) * u, (0.25, 0.35, 0.60), -1, lights=True)
    return img


STREET = Clip(
    video="day_to_night.mp4",
    title="A street from day to night",
    scene=(
        "A flat cartoon city street: a row of buildings with windows along a road. In daylight the sky is "
        "blue with a yellow sun, and a red car drives past from left to right. The scene then cuts to "
        "night: a dark blue sky with stars and a crescent moon, most windows lit yellow, and a blue car "
        "with headlights on drives past from right to left."
    ),
    phases=[
        Phase("day_quiet", 0.0, 2.0, "A quiet city street in daylight under a blue sky with a sun."),
        Phase("day_car", 2.0, 5.0, "A red car drives along the street from left to right."),
        Phase("day_empty", 5.0, 6.0, "The daytime street is empty again."),
        Phase("night_quiet", 6.0, 8.0, "The scene changes to night: dark sky, stars, moon and lit windows."),
        Phase("night_car", 8.0, 11.0, "A car with its headlights on drives from right to left."),
        Phase("night_empty", 11.0, 12.0, "The street is empty at night."),
    ],
    queries=[
        ("a red car drives past in daylight", "day_car", "day_car"),
        ("the street at night", "night_quiet", "night_empty"),
        ("a car with headlights drives by", "night_car", "night_car"),
    ],
    draw=draw_street,
)


# ---------------------------------------------------------------------------
# Clip 5: a lamp turns on and off
# ---------------------------------------------------------------------------

LAMP_X, LAMP_Y = 240.0, 95.0


def draw_lamp(clip: Clip, t: float) -> np.ndarray:
    phase, _ = clip.at(t)
    on = phase.key.startswith("on")
    img = canvas((0.36, 0.30, 0.24) if on else (0.05, 0.05, 0.07))
    rect(img, 0, 205, W, H, (0.42, 0.30, 0.20) if on else (0.06, 0.05, 0.05))  # floor
    if on:
        glow(img, LAMP_X, LAMP_Y + 10, 170, (1.0, 0.85, 0.55), 0.65)
    line(img, LAMP_X, 0, LAMP_X, LAMP_Y - 30, 3, (0.15, 0.15, 0.15))  # cord
    rect(img, LAMP_X - 40, LAMP_Y - 32, LAMP_X + 40, LAMP_Y - 12, (0.20, 0.45, 0.30))  # shade
    circle(img, LAMP_X, LAMP_Y - 2, 12, (1.0, 0.95, 0.60) if on else (0.30, 0.30, 0.28))  # bulb
    # A table with a cup, dim shapes when the lamp is off.
    k = 1.0 if on else 0.18
    rect(img, 140, 170, 340, 180, (0.55 * k, 0.35 * k, 0.20 * k))
    for lx in (150, 320):
        rect(img, lx, 180, lx + 10, 240, (0.50 * k, 0.32 * k, 0.18 * k))
    rect(img, 220, 150, 240, 170, (0.90 * k, 0.90 * k, 0.92 * k))
    return img


LAMP = Clip(
    video="lamp_on_off.mp4",
    title="A lamp switches on and off",
    scene=(
        "A small room with a hanging ceiling lamp above a wooden table with a white cup. The lamp is "
        "switched on twice: while it is on the bulb glows yellow and warm light fills the room; while it "
        "is off the room is almost completely dark."
    ),
    phases=[
        Phase("off1", 0.0, 3.0, "The room is dark and the lamp is off."),
        Phase("on1", 3.0, 6.0, "The lamp turns on and warm light fills the room."),
        Phase("off2", 6.0, 8.0, "The lamp turns off and the room goes dark."),
        Phase("on2", 8.0, 11.0, "The lamp turns on again and lights the table."),
        Phase("off3", 11.0, 12.0, "The lamp turns off again."),
    ],
    queries=[
        ("the lamp is on for the first time", "on1", "on1"),
        ("the lamp is switched on a second time", "on2", "on2"),
        ("the room is dark between the two times the lamp is on", "off2", "off2"),
    ],
    draw=draw_lamp,
)

CLIPS = [BALL, SQUARE, PEOPLE, STREET, LAMP]


# ---------------------------------------------------------------------------
# Encoding
# ---------------------------------------------------------------------------


def rgb_to_yuv420p(rgb: np.ndarray) -> np.ndarray:
    """BT.601 limited-range RGB -> planar YUV 4:2:0 in integer arithmetic.

    Done here rather than by swscale: its SIMD paths depend on buffer alignment, which made
    re-runs occasionally encode different bytes.
    """
    c = rgb.astype(np.int32)
    r, g, b = c[..., 0], c[..., 1], c[..., 2]
    y = ((66 * r + 129 * g + 25 * b + 128) >> 8) + 16
    # Average each 2x2 block (sum of four, rounded), then convert to chroma.
    r2, g2, b2 = (
        (ch[0::2, 0::2] + ch[1::2, 0::2] + ch[0::2, 1::2] + ch[1::2, 1::2] + 2) >> 2 for ch in (r, g, b)
    )
    u = ((-38 * r2 - 74 * g2 + 112 * b2 + 128) >> 8) + 128
    v = ((112 * r2 - 94 * g2 - 18 * b2 + 128) >> 8) + 128
    planes = [np.clip(p, 0, 255).astype(np.uint8).ravel() for p in (y, u, v)]
    return np.concatenate(planes).reshape(H * 3 // 2, W)


def encode(clip: Clip, path: Path) -> None:
    """Encode with libx264 (yuv420p, one thread, no encoder version tags) for repeatable output."""
    n = round(clip.duration * FPS)
    tmp = path.with_suffix(".tmp.mp4")
    with av.open(
        str(tmp), "w", format="mp4", options={"movflags": "+faststart", "fflags": "+bitexact"}
    ) as out:
        stream = out.add_stream(
            "libx264",
            rate=FPS,
            options={"crf": str(CRF), "preset": "medium", "x264-params": "keyint=20:min-keyint=20:threads=1"},
        )
        stream.width, stream.height, stream.pix_fmt = W, H, "yuv420p"
        stream.codec_context.thread_count = 1
        for i in range(n):
            rgb = (np.clip(clip.draw(clip, i / FPS), 0, 1) * 255 + 0.5).astype(np.uint8)
            frame = av.VideoFrame.from_ndarray(rgb_to_yuv420p(rgb), format="yuv420p")
            frame.pts = i
            frame.time_base = Fraction(1, FPS)
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    os.replace(tmp, path)


def main() -> None:
    for clip in CLIPS:
        path = OUT_DIR / clip.video
        encode(clip, path)
        print(f"{path.name}: {clip.duration:.1f} s, {path.stat().st_size / 1024:.0f} KiB")
    path = OUT_DIR / "examples.json"
    kept = []
    if path.is_file():  # the real-footage entries are not ours to rewrite: keep them first
        kept = [e for e in json.loads(path.read_text(encoding="utf-8")) if e.get("set") != SET]
    data = kept + [clip.ground_truth() for clip in CLIPS]
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"examples.json: {len(data)} clips ({len(kept)} kept, {len(CLIPS)} rendered)")


if __name__ == "__main__":
    main()
