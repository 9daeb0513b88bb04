"""The page icon, drawn here so that the browser fetches it from this server (a Material icon name
makes it fetch the image from fonts.gstatic.com: an outside request, and an error offline)."""
from __future__ import annotations

import numpy as np
from PIL import Image

KEPT = (31, 95, 191)        # figures.SPARSE_COLOUR: an event kept
SKIPPED = (241, 243, 246)   # the background of the events heatmap: an event skipped
# A 4 x 4 grid of head pairs (rows) by chunks (columns): which events the icon shows as kept.
PATTERN = ((1, 0, 1, 1), (0, 1, 0, 1), (1, 1, 0, 0), (0, 1, 1, 1))


def page_icon(cell: int = 14, gap: int = 2) -> Image.Image:
    size = 4 * cell + 3 * gap
    pixels = np.full((size, size, 3), 255, dtype=np.uint8)
    for row, kept_row in enumerate(PATTERN):
        for column, kept in enumerate(kept_row):
            top, left = row * (cell + gap), column * (cell + gap)
            pixels[top:top + cell, left:left + cell] = KEPT if kept else SKIPPED
    return Image.fromarray(pixels)
