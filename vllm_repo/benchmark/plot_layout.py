"""The geometry of the hand-written SVG plots (bench's --plot, tune's): axes fitted to the data, and labels placed
where they overlap neither each other nor the plot's points and lines.

No font is measured: a text's extent is estimated from its length, generously (CHAR_EM), so that a label placed
clear of the others by this estimate is clear of them in a browser too. A label goes beside its point where there is
room, farther out with a thin leader line where there is not, and where there is none inside the plot it becomes a
number beside its point, explained in a key under the plot.
"""

from __future__ import annotations

import dataclasses
import html
import itertools
import math
from collections.abc import Iterable, Sequence

# A sans-serif character's advance, in font sizes: DejaVu Sans's (the widest of the usual defaults; Helvetica's and
# Arial's are narrower) rounded up, with room for a bolder or wider font; CHAR_EM for a character not listed.
CHAR_EM = 0.66
CHAR_WIDTHS = {
    **dict.fromkeys("iljtf.,:;'!|()[] /", 0.44),
    **dict.fromkeys("_rsz", 0.6),
    **dict.fromkeys("=+<>~", 0.86),
    **dict.fromkeys("ABCDEFGHIJKLNOPQRSTUVXYZ", 0.8),
    **dict.fromkeys("mwMW%", 0.98),
}
ASCENT, DESCENT = 0.8, 0.22  # of a font size, above and below the baseline
LABEL_GAP = 2.0  # the least room around a label


def text_width(text: str, size: float) -> float:
    return size * sum(CHAR_WIDTHS.get(c, CHAR_EM) for c in text)


@dataclasses.dataclass(frozen=True)
class Box:
    x0: float
    y0: float
    x1: float
    y1: float

    def grown(self, by: float) -> Box:
        return Box(self.x0 - by, self.y0 - by, self.x1 + by, self.y1 + by)

    def overlaps(self, other: Box) -> bool:
        return self.x0 < other.x1 and other.x0 < self.x1 and self.y0 < other.y1 and other.y0 < self.y1

    def within(self, other: Box) -> bool:
        return self.x0 >= other.x0 and self.y0 >= other.y0 and self.x1 <= other.x1 and self.y1 <= other.y1

    def touches_circle(self, cx: float, cy: float, r: float) -> bool:
        nearest_x, nearest_y = min(max(cx, self.x0), self.x1), min(max(cy, self.y0), self.y1)
        return (nearest_x - cx) ** 2 + (nearest_y - cy) ** 2 < r * r

    def crosses(self, x1: float, y1: float, x2: float, y2: float) -> bool:
        """Whether the segment from (x1, y1) to (x2, y2) passes through the box (Liang-Barsky clipping)."""
        dx, dy = x2 - x1, y2 - y1
        low, high = 0.0, 1.0
        for p, q in ((-dx, x1 - self.x0), (dx, self.x1 - x1), (-dy, y1 - self.y0), (dy, self.y1 - y1)):
            if p == 0:
                if q < 0:
                    return False
                continue
            t = q / p
            if p < 0:
                low = max(low, t)
            else:
                high = min(high, t)
            if low > high:
                return False
        return True


def text_box(x: float, y: float, text: str, size: float, anchor: str = "start") -> Box:
    """The estimated extent of an SVG <text> at (x, y) (its baseline) with that text-anchor."""
    width = text_width(text, size)
    left = {"start": x, "middle": x - width / 2, "end": x - width}[anchor]
    return Box(left, y - ASCENT * size, left + width, y + DESCENT * size)


# ---------------------------------------------------------------------------------------------------------------------
# Axes
# ---------------------------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Axis:
    """An axis from ``lo`` to ``hi`` with a tick at every multiple of ``step`` between, drawn from ``start`` over
    ``length`` pixels (``reverse``: values grow towards ``start``, as a y axis does in SVG)."""

    lo: float
    hi: float
    step: float
    start: float
    length: float
    reverse: bool = False

    def at(self, value: float) -> float:
        share = (value - self.lo) / (self.hi - self.lo)
        return self.start + self.length * (1 - share if self.reverse else share)

    @property
    def ticks(self) -> list[float]:
        first, last = math.ceil(self.lo / self.step - 1e-9), math.floor(self.hi / self.step + 1e-9)
        return [i * self.step for i in range(first, last + 1)]

    def tick_text(self, value: float) -> str:
        # Ticks are whole multiples of a round step: six decimals hold them all, and the float's noise drops off.
        return f"{value:.6f}".rstrip("0").rstrip(".")


STEPS = (1.0, 2.0, 2.5, 5.0)
PADDING = 0.05  # of the data's span, on each side: the points stay off the frame


def fit_axis(
    values: Iterable[float],
    start: float,
    length: float,
    *,
    reverse: bool = False,
    tick_size: float = 11.0,
    horizontal: bool = True,
) -> Axis:
    """An axis over ``values``, a little padding on each side (never below 0 for values that are not): the data
    spans nine tenths of it. Its ticks fall on round numbers, as many as their labels leave room for, about five."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        finite = [0.0, 1.0]
    low, high = min(finite), max(finite)
    if high - low <= 1e-9 * max(abs(high), 1.0):
        half = abs(high) * 0.1 or 0.5
        low, high = low - half, high + half
    pad = (high - low) * PADDING
    low, high = (max(low - pad, 0.0) if low >= 0 else low - pad), high + pad
    span = high - low
    best: tuple[float, Axis] | None = None
    base = math.floor(math.log10(span)) - 2
    for power in range(base, base + 4):
        for factor in STEPS:
            axis = Axis(low, high, factor * 10.0**power, start, length, reverse)
            ticks = axis.ticks
            if not 3 <= len(ticks) <= 8:
                continue
            room = length * axis.step / span
            if horizontal:
                needed = max(text_width(axis.tick_text(t), tick_size) for t in ticks) + 8
            else:
                needed = tick_size * 1.6
            if needed > room:
                continue
            score = abs(len(ticks) - 5.5) + (0.5 if factor == 2.5 else 0.0)  # 2.5 only where it fits better
            if best is None or score < best[0]:
                best = (score, axis)
    if best is None:  # no round step leaves room for its labels: the ends alone
        return Axis(low, high, span, start, length, reverse)
    return best[1]


# ---------------------------------------------------------------------------------------------------------------------
# Labels
# ---------------------------------------------------------------------------------------------------------------------

# Where a label may go around its anchor, in the order tried: (dx, dy) of the label's side that faces the anchor.
DIRECTIONS = {
    "E": (1, 0),
    "NE": (1, -1),
    "SE": (1, 1),
    "N": (0, -1),
    "S": (0, 1),
    "W": (-1, 0),
    "NW": (-1, -1),
    "SW": (-1, 1),
}
DISTANCES = (2.0, 8.0, 16.0, 28.0, 44.0, 64.0)  # beyond the anchor's own radius; a leader line from the third on
LEADER_FROM = 16.0


@dataclasses.dataclass(frozen=True)
class Placed:
    x: float  # the text's start (text-anchor start) and baseline
    y: float
    text: str
    size: float
    box: Box
    leader: tuple[float, float, float, float] | None = None


class Layout:
    """Labels placed one by one inside ``bounds``, each clear of the labels placed before it, of the points and
    lines registered, and of the leader lines drawn so far."""

    def __init__(self, bounds: Box) -> None:
        self.bounds = bounds
        self.boxes: list[Box] = []
        self.circles: list[tuple[float, float, float]] = []
        self.segments: list[tuple[float, float, float, float]] = []

    def avoid_box(self, box: Box) -> None:
        self.boxes.append(box)

    def avoid_point(self, x: float, y: float, r: float) -> None:
        self.circles.append((x, y, r))

    def avoid_line(self, points: Sequence[tuple[float, float]]) -> None:
        for (x1, y1), (x2, y2) in itertools.pairwise(points):
            self.segments.append((x1, y1, x2, y2))

    def _free(self, box: Box, leader: tuple[float, float, float, float] | None) -> bool:
        if not box.within(self.bounds):
            return False
        clear = box.grown(LABEL_GAP)
        if any(clear.overlaps(b) for b in self.boxes):
            return False
        if any(clear.touches_circle(x, y, r) for x, y, r in self.circles):
            return False
        if any(clear.crosses(*s) for s in self.segments):
            return False
        if leader is not None:
            start_x, start_y = leader[0], leader[1]
            if any(b.grown(1).crosses(*leader) for b in self.boxes):
                return False
            for x, y, r in self.circles:
                own = (x - start_x) ** 2 + (y - start_y) ** 2 <= (r + 4) ** 2
                if not own and Box(x - r, y - r, x + r, y + r).crosses(*leader):
                    return False
        return True

    def place(
        self,
        text: str,
        size: float,
        anchors: Sequence[tuple[float, float]],
        radius: float = 0.0,
        directions: Sequence[str] = tuple(DIRECTIONS),
        distances: Sequence[float] = DISTANCES,
    ) -> Placed | None:
        """The first free place for ``text`` around one of ``anchors`` (a point of that ``radius``), nearest first;
        None where there is none. The place is taken: later labels keep clear of it."""
        width, height = text_width(text, size), (ASCENT + DESCENT) * size
        for distance in distances:
            for ax, ay in anchors:
                for name in directions:
                    dx, dy = DIRECTIONS[name]
                    reach = radius + distance
                    diagonal = math.sqrt(0.5) if dx and dy else 1.0
                    cx, cy = ax + dx * reach * diagonal, ay + dy * reach * diagonal  # the side facing the anchor
                    x0 = cx if dx > 0 else cx - width if dx < 0 else cx - width / 2
                    y0 = cy if dy > 0 else cy - height if dy < 0 else cy - height / 2
                    box = Box(x0, y0, x0 + width, y0 + height)
                    leader = None
                    if distance >= LEADER_FROM:
                        near_x, near_y = min(max(ax, box.x0), box.x1), min(max(ay, box.y0), box.y1)
                        along = math.hypot(near_x - ax, near_y - ay) or 1.0
                        start = (ax + (near_x - ax) * radius / along, ay + (near_y - ay) * radius / along)
                        leader = (start[0], start[1], near_x, near_y)
                    if self._free(box, leader):
                        self.boxes.append(box)
                        if leader is not None:
                            self.segments.append(leader)
                        return Placed(box.x0, box.y1 - DESCENT * size, text, size, box, leader)
        return None


def grid_svg(x_axis: Axis, y_axis: Axis, frame: Box) -> list[str]:
    """A plot's horizontal grid lines at the y ticks, and the tick labels of both axes, inside and beside ``frame``."""
    out = []
    for yv in y_axis.ticks:
        y = y_axis.at(yv)
        out.append(f'<line x1="{frame.x0}" y1="{y:.1f}" x2="{frame.x1}" y2="{y:.1f}" stroke="#eee"/>')
        out.append(
            f'<text x="{frame.x0 - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11">{y_axis.tick_text(yv)}</text>'
        )
    for xv in x_axis.ticks:
        out.append(
            f'<text x="{x_axis.at(xv):.1f}" y="{frame.y1 + 16}" text-anchor="middle" font-size="11">'
            f"{x_axis.tick_text(xv)}</text>"
        )
    return out


def label_svg(placed: Placed, colour: str = "#555") -> list[str]:
    """A placed label's SVG: its text, and its leader line where it stands off its point."""
    out = []
    if placed.leader is not None:
        x1, y1, x2, y2 = placed.leader
        out.append(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="#aaa" stroke-width="0.8"/>')
    out.append(
        f'<text x="{placed.x:.1f}" y="{placed.y:.1f}" font-size="{placed.size:g}" fill="{colour}">'
        f"{html.escape(placed.text)}</text>"
    )
    return out


@dataclasses.dataclass
class Keyed:
    """Labels that found no room beside their points: a number there, the text in the key under the plot."""

    entries: list[str] = dataclasses.field(default_factory=list)

    def place(
        self, layout: Layout, text: str, size: float, anchor: tuple[float, float], radius: float
    ) -> tuple[Placed | None, str | None]:
        """``text`` placed beside ``anchor``, else its number (returned with the key's line for it)."""
        placed = layout.place(text, size, [anchor], radius)
        if placed is not None:
            return placed, None
        number = str(len(self.entries) + 1)
        self.entries.append(text)
        return layout.place(number, size, [anchor], radius), f"{number}: {text}"
