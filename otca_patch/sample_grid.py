"""One PNG of samples side by side, the way people compare runs: a labelled row per run (side, arm,
checkpoint), a labelled column per prompt, columns optionally grouped under a heading (the first
and the last evaluation). Pillow only (diffusers already needs it): every command and every
trainer environment can draw it.

Each image is scaled to the cell height (``cell`` pixels; nearest-neighbour when enlarging, so a
tiny model's pixels stay sharp) keeping its aspect ratio; a column is as wide as its widest image,
at least ``cell``. A missing image (``None``) leaves its cell grey.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from PIL import Image, ImageDraw, ImageFont

from .files import atomic_path

GAP = 4  # pixels between cells
BACKGROUND = (255, 255, 255)
MISSING = (200, 200, 200)
INK = (0, 0, 0)
TEXT_SIZE = 12
HEADER_LINES = 3  # a prompt longer than this many lines is cut with an ellipsis


@dataclass
class Grid:
    """The drawn grid and where each cell is: ``boxes[(row, column)] = (left, top, right, bottom)``."""

    image: Image.Image
    boxes: dict

    def save(self, path) -> None:
        """Written atomically: a reader never sees half a PNG."""
        with atomic_path(path) as tmp:
            self.image.save(tmp, format="PNG")


def font(size: int = TEXT_SIZE):
    """Pillow's scalable default font where FreeType is built in, else its fixed bitmap font."""
    try:
        return ImageFont.load_default(size=size)
    except (TypeError, ImportError, OSError):
        return ImageFont.load_default()


def wrap(text: str, width: int, face, lines: int) -> list[str]:
    """``text`` in at most ``lines`` lines no wider than ``width`` pixels, broken between words (a
    word wider than a line, and the last line when text is left over, are cut with an ellipsis)."""
    result, words = [], text.split()
    while words and len(result) < lines:
        line = words.pop(0)
        while words and face.getlength(f"{line} {words[0]}") <= width:
            line = f"{line} {words.pop(0)}"
        result.append(line)
    if words:
        result[-1] = _cut(result[-1] + " " + " ".join(words), width, face)
    return [line if face.getlength(line) <= width else _cut(line, width, face) for line in result] or [""]


def _cut(line: str, width: int, face) -> str:
    """``line`` shortened until it fits ``width`` pixels with an ellipsis."""
    while line and face.getlength(line + "…") > width:
        line = line[:-1]
    return line.rstrip() + "…"


def scaled(image: Image.Image, height: int) -> Image.Image:
    """``image`` (RGB) at ``height`` pixels high, aspect kept."""
    image = image.convert("RGB")
    width = max(1, round(image.width * height / image.height))
    resample = Image.Resampling.NEAREST if height >= image.height else Image.Resampling.LANCZOS
    return image.resize((width, height), resample)


def sample_grid(rows: Sequence[tuple[str, Sequence[Optional[Image.Image]]]], columns: Sequence[str],
                groups: Sequence[tuple[str, int]] = (), cell: int = 128, title: str = "") -> Grid:
    """Lay out ``rows`` (label, one image or None per column) under ``columns`` (one label each).

    ``groups``: headings over consecutive columns, (label, number of columns), covering every column
    (e.g. ``[("step 1", 4), ("step 20", 4)]``); ``title``: one line above everything."""
    if not rows or not columns:
        raise ValueError("a sample grid needs at least one row and one column")
    for label, images in rows:
        if len(images) != len(columns):
            raise ValueError(f"row {label!r} has {len(images)} images for {len(columns)} columns")
    if groups and sum(span for _, span in groups) != len(columns):
        raise ValueError(f"column groups cover {sum(span for _, span in groups)} columns of {len(columns)}")
    face = font()
    line_height = TEXT_SIZE + 3
    cells = [[None if image is None else scaled(image, cell) for image in images] for _, images in rows]
    widths = [max([cell] + [row[c].width for row in cells if row[c] is not None]) for c in range(len(columns))]
    label_width = min(max(int(face.getlength(label)) for label, _ in rows) + 2 * GAP, 4 * cell)
    headers = [wrap(text, width, face, HEADER_LINES) for text, width in zip(columns, widths)]
    header_height = max(len(lines) for lines in headers) * line_height + GAP
    top = GAP + (line_height if title else 0) + (line_height + GAP if groups else 0) + header_height
    left = label_width + GAP
    xs = [left + sum(widths[:c]) + GAP * c for c in range(len(columns))]
    size = (xs[-1] + widths[-1] + GAP, top + len(rows) * (cell + GAP))
    canvas = Image.new("RGB", size, BACKGROUND)
    draw = ImageDraw.Draw(canvas)
    y = GAP
    if title:
        draw.text((GAP, y), title, fill=INK, font=face)
        y += line_height
    if groups:
        start = 0
        for text, span in groups:
            right = xs[start + span - 1] + widths[start + span - 1]
            draw.text((xs[start], y), wrap(text, right - xs[start], face, 1)[0], fill=INK, font=face)
            draw.line((xs[start], y + line_height, right, y + line_height), fill=INK)
            start += span
        y += line_height + GAP
    for x, lines in zip(xs, headers):
        for index, line in enumerate(lines):
            draw.text((x, y + index * line_height), line, fill=INK, font=face)
    boxes = {}
    for r, ((label, _), images) in enumerate(zip(rows, cells)):
        y = top + r * (cell + GAP)
        for index, line in enumerate(wrap(label, label_width - GAP, face, max(1, cell // line_height))):
            draw.text((GAP, y + index * line_height), line, fill=INK, font=face)
        for c, image in enumerate(images):
            box = (xs[c], y, xs[c] + (image.width if image is not None else widths[c]), y + cell)
            if image is None:
                draw.rectangle((box[0], box[1], box[2] - 1, box[3] - 1), fill=MISSING)
            else:
                canvas.paste(image, box[:2])
            boxes[r, c] = box
    return Grid(image=canvas, boxes=boxes)
