"""What the inspector's pages render besides templates: markdown with front matter (stored text
is hostile: raw HTML is never passed through, links are limited to safe schemes) and charts as
inline SVG drawn on the server (no JavaScript chart library)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml
from markdown_it import MarkdownIt
from markupsafe import Markup, escape

# commonmark without raw HTML: a "<script>" in a record body is text, not a tag; markdown-it's
# validateLink already refuses javascript:, vbscript:, file: and data: (but images) URLs.
_md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
_md.enable("table")


def markdown(text: str) -> Markup:
    """`text` rendered as HTML with every raw tag escaped (safe to put in a page)."""
    return Markup(_md.render(text))


def split_front_matter(text: str) -> tuple[dict[str, Any] | None, str]:
    """(front matter mapping or None, body) of a ``---\\n<yaml>\\n---\\n`` headed document; a
    header that is not a YAML mapping is left in the body."""
    if not text.startswith("---\n"):
        return None, text
    end = text.find("\n---", 4)
    if end < 0:
        return None, text
    try:
        data = yaml.safe_load(text[4:end])
    except yaml.YAMLError:
        return None, text
    if not isinstance(data, dict):
        return None, text
    rest = text[end + 4:]
    return {str(k): v for k, v in data.items()}, rest.removeprefix("\n")


# -- charts ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Bar:
    """A token bar: `used` of `budget` tokens (the width is clamped, the text is not)."""

    used: int
    budget: int

    @property
    def percent(self) -> float:
        return 0.0 if self.budget <= 0 else min(100.0, 100.0 * self.used / self.budget)

    @property
    def over(self) -> bool:
        return self.used > self.budget


def line_chart(
    points: Sequence[tuple[float, float]], *, limit: float | None = None, title: str,
    x_label: str, y_label: str, width: int = 640, height: int = 200,
) -> Markup:
    """An SVG line chart of (x, y) points with an optional horizontal limit line (the budget).

    Every text is escaped; the numbers are formatted by us, so the SVG carries no stored text.
    """
    pad_l, pad_r, pad_t, pad_b = 48, 12, 24, 28
    w, h = width - pad_l - pad_r, height - pad_t - pad_b
    xs = [p[0] for p in points] or [0.0]
    ys = [p[1] for p in points] or [0.0]
    x0, x1 = min(xs), max(xs)
    y1 = max([*ys, limit or 0.0, 1.0]) * 1.1

    def sx(x: float) -> float:
        return pad_l + (0.0 if x1 == x0 else (x - x0) / (x1 - x0) * w)

    def sy(y: float) -> float:
        return pad_t + h - y / y1 * h

    parts = [f'<svg class="chart" role="img" viewBox="0 0 {width} {height}" width="{width}" '
             f'height="{height}" xmlns="http://www.w3.org/2000/svg">',
             f'<title>{escape(title)}</title>',
             f'<text x="{pad_l + 8}" y="14" class="chart-title">{escape(title)}</text>',
             f'<line x1="{pad_l}" y1="{pad_t + h}" x2="{pad_l + w}" y2="{pad_t + h}" class="axis"/>',
             f'<line x1="{pad_l}" y1="{pad_t}" x2="{pad_l}" y2="{pad_t + h}" class="axis"/>',
             f'<text x="{pad_l + w}" y="{height - 6}" text-anchor="end" class="label">{escape(x_label)}</text>',
             f'<text x="4" y="14" class="label">{escape(y_label)}</text>',
             f'<text x="{pad_l - 4}" y="{sy(0):.1f}" text-anchor="end" class="tick">0</text>',
             f'<text x="{pad_l - 4}" y="{pad_t + 8}" text-anchor="end" class="tick">{int(y1)}</text>']
    if limit is not None:
        parts.append(f'<line x1="{pad_l}" y1="{sy(limit):.1f}" x2="{pad_l + w}" y2="{sy(limit):.1f}" '
                     f'class="limit"><title>budget {int(limit)} tokens</title></line>')
        parts.append(f'<text x="{pad_l + w}" y="{sy(limit) - 3:.1f}" text-anchor="end" '
                     f'class="limit-label">budget {int(limit)}</text>')
    if points:
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in points)
        parts.append(f'<polyline points="{path}" class="series"/>')
        for x, y in points:
            over = " over" if limit is not None and y > limit else ""
            parts.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.5" class="point{over}">'
                         f'<title>{x:g}: {y:g}</title></circle>')
        parts.append(f'<text x="{pad_l}" y="{height - 6}" class="tick">{x0:g}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))


def step_chart(points: Sequence[tuple[str, int]], *, title: str, width: int = 640,
               height: int = 160) -> Markup:
    """Cumulative count over time as an SVG step line: (ISO time, running total)."""
    numbered = [(float(i), float(n)) for i, (_t, n) in enumerate(points)]
    return line_chart(numbered, title=title, x_label="event (oldest → newest)", y_label="count",
                      width=width, height=height)
