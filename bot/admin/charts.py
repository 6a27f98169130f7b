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
