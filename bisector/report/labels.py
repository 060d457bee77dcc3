"""Text on a drawn matplotlib figure that does not collide: step labels stacked in rows, commit
labels thinned to what fits. Both measure the drawn text (its window extent), not a guess from
the number of characters: the report showed `#115 -21.8%#122 -26.6%` printed over each other."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.text import Annotation, Text
from matplotlib.transforms import Bbox

PAD_PX = 3.0  # the least gap between two labels


def _box(text: Text, fig: Figure) -> Bbox:
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]  # the Agg canvas (plots.py sets it) has one
    return text.get_window_extent(renderer).padded(PAD_PX / 2)


def overlap(a: Bbox, b: Bbox) -> bool:
    """Strict overlap: boxes that only touch do not collide."""
    return bool(a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1)


def stack(fig: Figure, texts: Sequence[Annotation], row_height: float, top: float = 0.97) -> int:
    """Move each annotation (its point's y in axes fraction, at `top`) down by whole rows until it
    collides with none placed before it; the number of rows used. The figure must have been drawn."""
    placed: list[Bbox] = []
    rows = 0
    for text in texts:
        row = 0
        while True:
            text.xy = (text.xy[0], top - row * row_height)
            box = _box(text, fig)
            if not any(overlap(box, other) for other in placed):
                break
            row += 1
        placed.append(box)
        rows = max(rows, row + 1)
    return rows


def thin_ticks(
    fig: Figure, ax: Axes, positions: Sequence[float], labels: Sequence[str], priority: Sequence[int], **style: Any
) -> list[int]:
    """Label the x ticks of `ax` that fit: the indices in `priority` first, then the others from the
    left; a label that would collide with one kept is dropped (its tick stays, unlabelled). The
    indices kept, in order. `style`: the labels' Text properties (rotation, fontsize)."""
    ax.set_xticks(list(positions), list(labels), **style)
    fig.draw_without_rendering()
    ticks = ax.get_xticklabels()
    boxes = [_box(t, fig) for t in ticks]
    order = list(dict.fromkeys([*priority, *range(len(labels))]))
    kept: list[int] = []
    for i in order:
        if 0 <= i < len(boxes) and not any(overlap(boxes[i], boxes[k]) for k in kept):
            kept.append(i)
    kept.sort()
    ax.set_xticks([positions[i] for i in kept], [labels[i] for i in kept], **style)
    ax.set_xticks([p for i, p in enumerate(positions) if i not in set(kept)], minor=True)
    return kept
