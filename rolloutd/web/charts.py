"""Charts drawn on the server as inline SVG: no script, no asset, nothing to fetch.

A gate chart draws one marker per evaluation it is given, coloured by verdict, at the
canary's value (an evaluation without a value, inconclusive or pending, sits on the
baseline as a hollow marker), stable's value beside it where the gate compares the two,
the canary's bound as a band where the statistic gives one, the threshold as a dashed
line, step changes as faint verticals, and the evaluation the rollback acted on ringed.
Every marker carries its time, value, verdict and reason as a tooltip and as ``data-``
attributes, so a reader (or a test) can tell each one apart.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from html import escape
from typing import Any

from rolloutd.web.data import GateChart, Point

WIDTH, HEIGHT = 760, 200
LEFT, RIGHT, TOP, BOTTOM = 64, 12, 24, 28
X_TICKS = 6
"""Time labels on the x-axis, ends included."""


class Frame:
    """Maps times and values onto the plot area."""

    def __init__(self, start: datetime, end: datetime, low: float, high: float) -> None:
        self.start, self.span = start, max((end - start).total_seconds(), 1.0)
        self.low, self.high = low, high if high > low else low + 1.0

    def x(self, at: datetime) -> float:
        share = (at - self.start).total_seconds() / self.span
        return round(LEFT + min(max(share, 0.0), 1.0) * (WIDTH - LEFT - RIGHT), 1)

    def y(self, value: float) -> float:
        share = (value - self.low) / (self.high - self.low)
        return round(HEIGHT - BOTTOM - min(max(share, 0.0), 1.0) * (HEIGHT - TOP - BOTTOM), 1)


def gate_svg(
    chart: GateChart, start: datetime, end: datetime, steps: Sequence[Mapping[str, Any]]
) -> str:
    """The gate's chart as an ``<svg>`` element."""
    values = [
        v for p in chart.points for v in (p.canary, p.stable, p.lower, p.upper) if v is not None
    ]
    if chart.limit is not None:
        values.append(chart.limit)
    low = min([0.0, *values])
    high = max([*values, 0.0]) * 1.1 or 1.0
    frame = Frame(start, end, low, high)
    parts = [_open(f"gate {chart.name}"), _axes(frame, start, end), _steps(frame, steps)]
    band = [
        (p.at, p.lower, p.upper)
        for p in chart.points
        if p.lower is not None and p.upper is not None
    ]
    if band:
        upper = " ".join(f"{frame.x(at)},{frame.y(hi)}" for at, _, hi in band)
        lower = " ".join(f"{frame.x(at)},{frame.y(lo)}" for at, lo, _ in reversed(band))
        parts.append(
            f'<polygon class="bound" points="{upper} {lower}"><title>canary bound</title></polygon>'
        )
    if chart.limit is not None:
        y = frame.y(chart.limit)
        parts.append(
            f'<line class="threshold" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y}" y2="{y}">'
            f"<title>threshold {escape(chart.threshold or '')}</title></line>"
        )
    stable = [(p.at, p.stable) for p in chart.points if p.stable is not None]
    if stable:
        line = " ".join(f"{frame.x(at)},{frame.y(v)}" for at, v in stable)
        parts.append(
            f'<polyline class="stable" data-series="stable" points="{line}">'
            "<title>stable</title></polyline>"
        )
    canary = [(p.at, p.canary) for p in chart.points if p.canary is not None]
    if canary:
        line = " ".join(f"{frame.x(at)},{frame.y(v)}" for at, v in canary)
        parts.append(
            f'<polyline class="canary" data-series="canary" points="{line}">'
            "<title>canary</title></polyline>"
        )
    parts.append('<g class="points">')
    parts.extend(_marker(frame, p) for p in chart.points)
    parts.append("</g></svg>")
    return "".join(parts)


def weight_svg(
    weights: Sequence[tuple[datetime, float]],
    start: datetime,
    end: datetime,
    steps: Sequence[Mapping[str, Any]],
) -> str:
    """The canary weight the router served, as a step line from 0 to 100%."""
    frame = Frame(start, end, 0.0, 100.0)
    parts = [_open("canary weight"), _axes(frame, start, end, unit="%"), _steps(frame, steps)]
    if weights:
        corners: list[str] = []
        previous = 0.0
        for at, weight in weights:
            corners.append(f"{frame.x(at)},{frame.y(previous)}")
            corners.append(f"{frame.x(at)},{frame.y(weight)}")
            previous = weight
        corners.append(f"{frame.x(end)},{frame.y(previous)}")
        parts.append(f'<polyline class="weight" points="{" ".join(corners)}"></polyline>')
        for at, weight in weights:
            parts.append(
                f'<circle class="weight-change" cx="{frame.x(at)}" cy="{frame.y(weight)}" r="3">'
                f"<title>{at.isoformat(timespec='seconds')}: {weight:g}%</title></circle>"
            )
    parts.append("</svg>")
    return "".join(parts)


def _open(label: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'width="{WIDTH}" height="{HEIGHT}" role="img" aria-label="{escape(label)}">'
    )


def _axes(frame: Frame, start: datetime, end: datetime, unit: str = "") -> str:
    bottom, top = HEIGHT - BOTTOM, TOP
    parts = [
        f'<line class="axis" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{bottom}" y2="{bottom}"></line>',
        f'<line class="axis" x1="{LEFT}" x2="{LEFT}" y1="{top}" y2="{bottom}"></line>',
    ]
    for value in (frame.low, (frame.low + frame.high) / 2, frame.high):
        y = frame.y(value)
        parts.append(
            f'<text class="tick" x="{LEFT - 6}" y="{y + 4}" text-anchor="end">'
            f"{_short(value)}{unit}</text>"
        )
    span = end - start
    # Dates once the span passes a day; minutes below it; seconds for a short rollout.
    shape = "%m-%d %H:%M" if span.total_seconds() > 86400 else "%H:%M"
    if span.total_seconds() < 600:
        shape = "%H:%M:%S"
    for i in range(X_TICKS):
        at = start + span * (i / (X_TICKS - 1))
        x = frame.x(at)
        anchor = "start" if i == 0 else "end" if i == X_TICKS - 1 else "middle"
        parts.append(
            f'<line class="xtick" x1="{x}" x2="{x}" y1="{bottom}" y2="{bottom + 4}"></line>'
            f'<text class="tick x" x="{x}" y="{HEIGHT - 8}" text-anchor="{anchor}">'
            f"{at.strftime(shape)}</text>"
        )
    return "".join(parts)


def _steps(frame: Frame, steps: Sequence[Mapping[str, Any]]) -> str:
    """Each step's start as a vertical line labelled with its number and name above the plot;
    a label that would run into the one before drops a line."""
    parts = []
    previous_end = -1.0
    row = 0
    for step in steps:
        if step.get("entered_at") is None:
            continue
        x = frame.x(step["entered_at"])
        label = f"{step['step']} {step['name']}"
        row = row + 1 if x < previous_end and row < 1 else 0
        previous_end = x + 5.5 * len(label) + 6
        y = TOP - 4 - (0 if row == 0 else -11)
        parts.append(
            f'<line class="step" x1="{x}" x2="{x}" y1="{TOP}" y2="{HEIGHT - BOTTOM}">'
            f"<title>step {escape(label)}</title></line>"
            f'<text class="step-label" x="{x + 2}" y="{y}" data-step="{step["step"]}">'
            f"{escape(label)}</text>"
        )
    return "".join(parts)


def _marker(frame: Frame, point: Point) -> str:
    x = frame.x(point.at)
    hollow = point.canary is None
    y = frame.y(frame.low if point.canary is None else point.canary)
    value = "none" if point.canary is None else f"{point.canary:.6g}"
    title = f"{point.at.isoformat(timespec='seconds')} step {point.step}: {point.verdict}"
    title += "" if point.canary is None else f", canary {point.canary:.6g}"
    title += "" if point.stable is None else f", stable {point.stable:.6g}"
    title += f" - {point.reason}" if point.reason else ""
    classes = f"point v-{escape(point.verdict)}{' hollow' if hollow else ''}"
    ring = ""
    if point.decided_rollback:
        classes += " decided"
        ring = f'<circle class="decider" cx="{x}" cy="{y}" r="9"></circle>'
    return (
        f'{ring}<circle class="{classes}" cx="{x}" cy="{y}" r="3.5" data-id="{point.id}" '
        f'data-at="{point.at.isoformat()}" data-verdict="{escape(point.verdict)}" '
        f'data-value="{value}"><title>{escape(title)}</title></circle>'
    )


def _short(value: float) -> str:
    return f"{value:.3g}"
