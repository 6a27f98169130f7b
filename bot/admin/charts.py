"""Small time-series charts as inline SVG, drawn on the server: no JavaScript, no build step,
and they pass the dashboard's Content-Security-Policy (no inline script, no remote image)."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

WIDTH, HEIGHT, PAD = 300, 60, 2


def sparkline(values: Sequence[int | float], label: str) -> str:
    """A line chart of ``values`` (oldest first) scaled to its own maximum, with its label."""
    top = max(max(values, default=0), 1)
    step = (WIDTH - 2 * PAD) / max(len(values) - 1, 1)
    points = " ".join(
        f"{PAD + i * step:.1f},{HEIGHT - PAD - (v / top) * (HEIGHT - 2 * PAD):.1f}"
        for i, v in enumerate(values)
    )
    name = escape(label)
    return (
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" '
        f'role="img" aria-label="{name}, last {len(values)} minutes, peak {top:g}">'
        f'<polyline fill="none" stroke="currentColor" stroke-width="1.5" points="{points}"/>'
        f'<text x="4" y="12" font-size="10">{name} (peak {top:g}/min)</text></svg>'
    )


def line_chart(values: Sequence[float], label: str, unit: str, first: str, last: str) -> str:
    """A wider chart of ``values`` (oldest first) scaled to its own maximum, with its label,
    its peak in ``unit`` and the times of its first and last points under it."""
    width, height, pad = 600, 110, 14
    peak = max(max(values, default=0), 0)
    top = peak or 1  # the scale; an empty chart is a flat line at zero
    step = (width - 2 * pad) / max(len(values) - 1, 1)
    span = height - 2 * pad
    points = " ".join(
        f"{pad + i * step:.1f},{height - pad - (v / top) * span:.1f}" for i, v in enumerate(values)
    )
    name, peak_text = escape(label), escape(f"{peak:.4g} {unit}".strip())
    return (
        f'<svg class="chart wide" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" role="img" aria-label="{name}, peak {peak_text}">'
        f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" '
        f'stroke="currentColor" stroke-opacity="0.3"/>'
        f'<polyline fill="none" stroke="currentColor" stroke-width="1.5" points="{points}"/>'
        f'<text x="{pad}" y="10" font-size="10">{name} (peak {peak_text})</text>'
        f'<text x="{pad}" y="{height - 2}" font-size="9">{escape(first)}</text>'
        f'<text x="{width - pad}" y="{height - 2}" font-size="9" text-anchor="end">'
        f"{escape(last)}</text></svg>"
    )
