"""A few of a run's samples, kept as small PNGs beside its run log, so that runs can be compared by
eye (``otca-patch compare`` lays them out as ``samples.png``).

``<log dir>/samples/first/`` holds the first training step's samples, ``<log dir>/samples/last/``
the latest step's (rewritten every step, so a stopped run still has its last one), and
``<log dir>/samples/again/`` the latest later step that saw the first step's prompts again (in the
first step's order), so that what training changed shows on the same prompts; a run whose trainer
never came back to those prompts has none. Each holds ``samples.json`` (``step``, ``prompts``,
``files``, ``frames``) and one PNG per sample: an image, or for a video a strip of ``frames`` frames
spread over it. One sample per distinct prompt comes first, so the columns show different prompts;
two runs with the same seed (the A/B sides) keep the same prompts and noise at the same step.
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from .files import atomic_path, atomic_write_json

FOLDER = "samples"
INDEX = "samples.json"
FIRST, LAST, AGAIN = "first", "last", "again"


@dataclass
class Kept:
    """One kept step: its number, prompts and images (PIL, one per sample)."""

    step: int
    prompts: list
    images: list
    frames: list  # frames per sample (1: an image)


def to_frames(sample, frames: int) -> list:
    """One decoded sample as PIL RGB frames: a PIL image, a ``[3, H, W]`` or ``[F, 3, H, W]``
    tensor/array in [0, 1], a ``[F, H, W, 3]`` array in [0, 1], or a list of PIL frames. A video
    gives ``frames`` frames spread over it (its first and last included)."""
    from PIL import Image
    import numpy as np

    if isinstance(sample, Image.Image):
        return [sample.convert("RGB")]
    if isinstance(sample, (list, tuple)):
        return [frame.convert("RGB") for frame in spread(list(sample), frames)]
    if getattr(sample, "ndim", 0) == 4:  # a video: only the shown frames are copied and converted
        sample = sample[spread(list(range(sample.shape[0])), frames)]
    if hasattr(sample, "detach"):
        sample = sample.detach().float().cpu().numpy()
    array = np.asarray(sample, dtype=np.float32)
    if array.ndim == 3:
        array = array[None]
    if array.ndim != 4:
        raise ValueError(f"a sample must be an image [3, H, W] or a video [F, 3, H, W] / [F, H, W, 3], "
                         f"got shape {tuple(array.shape)}")
    if array.shape[1] == 3 and array.shape[-1] != 3:
        array = array.transpose(0, 2, 3, 1)  # [F, 3, H, W] -> [F, H, W, 3]
    pixels = (np.clip(array, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)
    return [Image.fromarray(frame) for frame in pixels]


def spread(items: list, count: int) -> list:
    """``count`` of ``items`` evenly spaced, first and last included (all when there are fewer)."""
    if len(items) <= count:
        return items
    if count < 2:
        return items[:1]
    return [items[round(i * (len(items) - 1) / (count - 1))] for i in range(count)]


#: white pixels between the frames of a video's strip
FRAME_GAP = 2


def strip(frames: list, height: int):
    """The frames side by side at ``height`` pixels (aspect kept; none enlarged), ``FRAME_GAP``
    white pixels apart: one PIL image."""
    from PIL import Image

    scaled = [f.resize((max(1, round(f.width * height / f.height)), height), Image.Resampling.LANCZOS)
              if f.height > height else f for f in frames]
    height = max(f.height for f in scaled)
    width = sum(f.width for f in scaled) + FRAME_GAP * (len(scaled) - 1)
    canvas = Image.new("RGB", (width, height), (255, 255, 255))
    x = 0
    for frame in scaled:
        canvas.paste(frame, (x, 0))
        x += frame.width + FRAME_GAP
    return canvas


class SampleKeeper:
    """Keeps ``count`` samples of each step (as small PNGs: at most ``height`` pixels high, a video
    ``frames`` frames) and writes the first step's and the latest step's under ``directory/samples``."""

    def __init__(self, directory, count: int = 4, frames: int = 3, height: int = 256):
        self.folder = Path(directory) / FOLDER
        self.count, self.frames, self.height = count, frames, height
        self.first_prompts: list | None = None  # the prompts of the first step's kept samples, once written
        self.pending: list = []  # (prompt, [frames]) of this step

    def add(self, samples, prompts) -> None:
        """Decoded samples of one batch (iterable: PIL images, tensors, arrays, frame lists) and
        their prompts. Only what can still be shown is converted: one per new prompt, or a few more."""
        self._safely(self._add, samples, prompts)

    def end_step(self, step: int) -> None:
        """Write this step's kept samples (the first step's once, the latest always) and forget them."""
        self._safely(self._end_step, step)

    def _safely(self, action, *args) -> None:
        """Pictures are a convenience: a sample they cannot show (or a full disk) stops the keeping,
        with one warning, never the training."""
        if self.count < 1:
            return
        try:
            action(*args)
        except Exception as exc:  # noqa: BLE001 (anything: training goes on without pictures)
            self.count, self.pending = 0, []
            print(f"otca-patch: warning: no more samples are kept in {self.folder}: {exc}", file=sys.stderr)

    def _add(self, samples, prompts) -> None:
        for sample, prompt in zip(samples, prompts):
            prompt, seen = str(prompt), [p for p, _ in self.pending]
            if (len(self.pending) < self.count or (prompt not in seen and len(set(seen)) < self.count)
                    or seen.count(prompt) < (self.first_prompts or []).count(prompt)):
                self.pending.append((prompt, to_frames(sample, self.frames)))

    def _end_step(self, step: int) -> None:
        pending, self.pending = self.pending, []
        chosen = self.choose(pending)
        if not chosen:
            return
        if self.first_prompts is None:
            self.write(self.folder / FIRST, step, chosen)
            self.first_prompts = [prompt for prompt, _ in chosen]
        else:
            again = self.in_first_order(pending)
            if again is not None:
                self.write(self.folder / AGAIN, step, again)
        self.write(self.folder / LAST, step, chosen)

    def in_first_order(self, pending: list) -> list | None:
        """This step's samples of the first step's prompts, one for each of its samples and in its order;
        None when this step did not see all of them."""
        unused = list(pending)
        ordered = []
        for prompt in self.first_prompts:
            index = next((i for i, (seen, _) in enumerate(unused) if seen == prompt), None)
            if index is None:
                return None
            ordered.append(unused.pop(index))
        return ordered

    def choose(self, pending: list) -> list:
        """One sample per distinct prompt first (in order), then the others, ``count`` in all."""
        firsts, rest, seen = [], [], set()
        for prompt, frames in pending:
            (rest if prompt in seen else firsts).append((prompt, frames))
            seen.add(prompt)
        return (firsts + rest)[:self.count]

    def write(self, folder: Path, step: int, chosen: list) -> None:
        """PNGs named by step, then the index (atomically): the index never names a missing file;
        files of earlier steps are removed after it."""
        folder.mkdir(parents=True, exist_ok=True)
        files = []
        for index, (_, frames) in enumerate(chosen):
            name = f"step{step}_{index}.png"
            with atomic_path(folder / name) as tmp:
                strip(frames, self.height).save(tmp, format="PNG")
            files.append(name)
        atomic_write_json(folder / INDEX, {"step": step, "prompts": [p for p, _ in chosen], "files": files,
                                           "frames": [len(f) for _, f in chosen]})
        for old in folder.glob("step*.png"):
            if old.name not in files:
                old.unlink(missing_ok=True)


def read_kept(run_folder, which: str) -> Kept | None:
    """The kept samples ``which`` (``FIRST``, ``LAST`` or ``AGAIN``) of a run folder; None when it kept none."""
    from PIL import Image

    folder = Path(run_folder) / FOLDER / which
    try:
        index = json.loads((folder / INDEX).read_text())
        images = []
        for name in index["files"]:
            with Image.open(folder / name) as image:
                images.append(image.convert("RGB"))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return Kept(step=int(index["step"]), prompts=list(index["prompts"]), images=images,
                frames=list(index.get("frames", [1] * len(images))))
