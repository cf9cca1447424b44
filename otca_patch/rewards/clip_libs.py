"""Which CLIP library this environment has: the one resolver every CLIP-based reward asks.

The trainers' own environments differ, and the rewards work with what is there:
- MixGRPO's has open_clip_torch (``open_clip``) and OpenAI's ``clip``;
- DanceGRPO's has no ``open_clip``: its launch scripts install hpsv2, whose FLUX reward uses the
  open_clip vendored inside it (``hpsv2.src.open_clip``, the same API, an older release);
- FlowGRPO's has neither: transformers' ``CLIPModel`` loads checkpoints in HF format there.
Probing uses ``importlib.util.find_spec`` only (no import of torch-heavy packages); a missing
library is one ``MissingPackage`` line naming the package and the extra that installs it.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import shutil
import warnings
from pathlib import Path
from typing import Optional

#: OpenAI CLIP's BPE vocabulary; open_clip, hpsv2's vendored open_clip and OpenAI's clip ship it.
BPE_VOCAB = "bpe_simple_vocab_16e6.txt.gz"
REWARDS_EXTRA = "pip install 'otca-patch[rewards]'"
OPEN_CLIP, HPSV2_OPEN_CLIP = "open_clip", "hpsv2.src.open_clip"
#: Package folders that hold BPE_VOCAB, in the order they are asked (hpsv2's wheel may lack it).
_VOCAB_FOLDERS = (("open_clip", ""), ("clip", ""), ("hpsv2", "src/open_clip"))


class MissingPackage(ImportError):
    """A reward needs a package this environment lacks; the message names it and the pip extra."""


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _package_dir(module: str) -> Optional[Path]:
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    return Path(spec.origin).parent if spec is not None and spec.origin else None


def bpe_vocab_file() -> Optional[Path]:
    """OpenAI CLIP's BPE vocabulary from whichever installed package ships it, else None."""
    for module, sub in _VOCAB_FOLDERS:
        folder = _package_dir(module)
        if folder is not None and (folder / sub / BPE_VOCAB).is_file():
            return folder / sub / BPE_VOCAB
    return None


def open_clip_name() -> Optional[str]:
    """``"open_clip"``, else ``"hpsv2.src.open_clip"``, whichever is installed first; None if neither."""
    if installed("open_clip"):
        return OPEN_CLIP
    if installed("hpsv2"):
        return HPSV2_OPEN_CLIP
    return None


def open_clip_file_problem(model: str, path: Optional[str]) -> Optional[str]:
    """The line saying an open_clip checkpoint file cannot load here (neither open_clip nor hpsv2),
    else None; a transformers folder loads through transformers."""
    if path is None or Path(path).expanduser().is_dir() or open_clip_name() is not None:
        return None
    return (f"reward model {model!r}: {path} is an open_clip checkpoint file, which needs open_clip (package "
            f"open_clip_torch) or hpsv2, and neither is installed: {REWARDS_EXTRA} "
            f"(or give a transformers CLIP folder, which loads through transformers)")


def import_open_clip(needed_by: str):
    """open_clip, or hpsv2's vendored copy of it; ``MissingPackage`` when neither is installed."""
    name = open_clip_name()
    if name is None:
        raise MissingPackage(f"{needed_by} needs open_clip (package open_clip_torch) or hpsv2's vendored copy; "
                             f"neither is installed: {REWARDS_EXTRA}")
    if name == OPEN_CLIP:
        return importlib.import_module(OPEN_CLIP)
    return import_hpsv2_open_clip(needed_by)


def import_hpsv2_open_clip(needed_by: str = "reward model 'hpsv2'"):
    """``hpsv2.src.open_clip``, its vocabulary restored first; its timm-path FutureWarnings silenced.

    The hpsv2 1.2.0 wheel omits the vocabulary its git checkout has, and importing its open_clip then
    fails with FileNotFoundError. The file is OpenAI CLIP's BPE, byte-identical to the one open_clip
    and OpenAI's clip ship: it is copied over once from either.
    """
    folder = _package_dir("hpsv2")
    if folder is None:
        raise MissingPackage(f"{needed_by} needs the hpsv2 package, which is not installed: {REWARDS_EXTRA}")
    target = folder / "src" / "open_clip" / BPE_VOCAB
    if not target.is_file():
        source = bpe_vocab_file()
        if source is None:
            raise MissingPackage(f"{needed_by}: hpsv2's tokenizer vocabulary {target} is missing (its wheel omits "
                                 f"it) and no open_clip_torch ships a copy: {REWARDS_EXTRA}")
        # every rank of a launch (and every test worker) may arrive here at once: a reader must see
        # the whole file or none, so the copy lands under a private name and is renamed into place
        partial = target.with_name(f".{BPE_VOCAB}.{os.getpid()}.partial")
        try:
            shutil.copyfile(source, partial)
            os.replace(partial, target)
        except OSError as exc:
            partial.unlink(missing_ok=True)
            raise MissingPackage(f"{needed_by}: hpsv2's tokenizer vocabulary is missing; copy it by hand: "
                                 f"cp {source} {target} ({exc})") from exc
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return importlib.import_module(HPSV2_OPEN_CLIP)
