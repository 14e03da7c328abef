"""The geometry of the app index's small charts, drawn as inline SVG by the templates: no JavaScript and
nothing fetched. Coordinates are in a fixed viewBox the SVG scales to its box, and are formatted here
(a dot decimal), so a locale that writes "2,5" never reaches an SVG attribute. The templates word the
titles and summaries."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any

WIDTH = 300  # viewBox units: 10 per day over 30 days
HEIGHT = 100
TOP = 4  # room above the tallest bar or point, so a point's circle is not cut
BAR = 0.7  # of a day's width; the rest is the gap between days
MIN_BAR = 1.0  # a day with something shows at least this much, however busy the busiest


def _coordinate(value: float) -> str:
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return text if text not in ("", "-0") else "0"


@dataclass(frozen=True)
class Rect:
    x: str
    y: str
    width: str
    height: str
    css: str = ""


@dataclass(frozen=True)
class Column:
    """One day: its bars (bottom first), the whole column that carries its title, its figures."""

    day: date
    hit: Rect
    bars: tuple[Rect, ...]
    data: Any
    value: float | None  # None for a day with nothing (no bar, no point)


@dataclass(frozen=True)
class Chart:
    columns: tuple[Column, ...]
    peak: Column | None  # the day with the highest value, the latest of equal ones; None if none
    low: Column | None  # the day with the lowest value, likewise
    path: str = ""  # a line chart's line, broken where a day has no value
    points: tuple[tuple[str, str], ...] = ()  # a line chart's (x, y) per day with a value
    width: int = WIDTH
    height: int = HEIGHT

    @property
    def first_day(self) -> date:
        return self.columns[0].day


def _columns(days: Sequence[date]) -> list[tuple[float, float]]:
    """The left edge and width of each day's column."""
    step = WIDTH / len(days)
    return [(i * step, step) for i in range(len(days))]


def _hit(x: float, step: float) -> Rect:
    return Rect(_coordinate(x), "0", _coordinate(step), _coordinate(HEIGHT))


def _extremes(columns: Sequence[Column]) -> tuple[Column | None, Column | None]:
    valued = [c for c in columns if c.value is not None]
    if not valued:
        return None, None
    peak = max(reversed(valued), key=lambda c: c.value or 0.0)
    low = min(reversed(valued), key=lambda c: c.value or 0.0)
    return peak, low


def stacked_bars(
    *, days: Sequence[date], stacks: Sequence[Sequence[tuple[str, float]]], data: Sequence[Any]
) -> Chart:
    """A bar per day, stacked from the bottom in the order of its (css class, value) pairs, scaled so
    the day with the most fills the height. A zero draws no bar."""
    totals = [sum(value for _, value in stack) for stack in stacks]
    scale = (HEIGHT - TOP) / max(totals) if any(totals) else 0.0
    columns = []
    for (x, step), day, stack, total, datum in zip(_columns(days), days, stacks, totals, data, strict=True):
        bars, top = [], float(HEIGHT)
        for css, value in stack:
            if not value:
                continue
            below, top = top, max(top - max(value * scale, MIN_BAR), 0.0)
            bars.append(
                Rect(
                    _coordinate(x + step * (1 - BAR) / 2),
                    _coordinate(top),
                    _coordinate(step * BAR),
                    _coordinate(below - top),
                    css,
                )
            )
        columns.append(Column(day, _hit(x, step), tuple(bars), datum, total or None))
    return Chart(tuple(columns), *_extremes(columns))


def line(*, days: Sequence[date], values: Sequence[float | None], data: Sequence[Any]) -> Chart:
    """A point per day with a value, joined to the previous day's; a day without one breaks the line.
    The highest value reaches the top."""
    highest = max((v for v in values if v is not None), default=0.0)
    scale = (HEIGHT - 2 * TOP) / highest if highest else 0.0
    columns, points, path, previous = [], [], [], False
    for (x, step), day, value, datum in zip(_columns(days), days, values, data, strict=True):
        columns.append(Column(day, _hit(x, step), (), datum, value))
        if value is None:
            previous = False
            continue
        point = (_coordinate(x + step / 2), _coordinate(HEIGHT - TOP - value * scale))
        path.append(f"{'L' if previous else 'M'}{point[0]} {point[1]}")
        points.append(point)
        previous = True
    return Chart(tuple(columns), *_extremes(columns), path=" ".join(path), points=tuple(points))
