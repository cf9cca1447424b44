"""Local checkpoint resolution and loading; nothing here ever downloads.

A checkpoint path comes from the caller (``checkpoint=`` / a CLI flag) or else from an environment
variable (``OTCA_CKPT_<NAME>``). Every failure -- nothing given, a missing path, an unreadable or
corrupt file, a state dict that does not fit the architecture -- raises ``CheckpointError`` naming
the reward model, the path tried and the published file that is expected there.
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, Mapping, Optional, Union

import torch

PathLike = Union[str, os.PathLike]

# Environment variables that make huggingface_hub / transformers refuse network access. They are
# read when those libraries are imported *and* by some calls at run time, so loaders both set them
# (for the duration of the load) and pass local_files_only=True.
_OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


class CheckpointError(ValueError):
    """A reward checkpoint is missing, unreadable or does not match the expected published file."""


@dataclass(frozen=True)
class CheckpointSpec:
    """What one checkpoint slot of a reward model expects.

    model: reward name ("hpsv2"); env_var: where to look when no path is given;
    expected: the published file, for error messages; kind: "file", "dir" or "any";
    option: the loader's keyword for a second file (aesthetic's ``clip_checkpoint``), None for the
    model's own checkpoint.
    """

    model: str
    env_var: str
    expected: str
    kind: str = "file"
    option: Optional[str] = None

    def how_to_give(self) -> str:
        """The flag a training run and ``otca-patch eval`` take for this file, the keyword, the variable."""
        if self.option is None:
            return (f"pass --otca_reward_ckpt {self.model}=PATH to the training run (otca-patch eval: "
                    f"--reward_ckpt {self.model}=PATH; Python: checkpoint=PATH) or set {self.env_var}")
        return (f"pass --otca_reward_opt {self.model}.{self.option}=PATH to the training run (otca-patch eval: "
                f"--reward_opt {self.model}.{self.option}=PATH; Python: {self.option}=PATH) or set {self.env_var}")

    def error(self, path: Optional[PathLike], problem: str, given_as: Optional[str] = None) -> CheckpointError:
        """``given_as``: how the caller passes the path (a launch: ``--otca_reward_ckpt NAME=PATH``); by
        default every way (``how_to_give``)."""
        tried = f"path tried: {path}" if path is not None else f"no path given and ${self.env_var} is unset"
        return CheckpointError(
            f"reward model {self.model!r}: {problem}; {tried}; expected {self.expected} "
            f"({f'pass {given_as} or set {self.env_var}' if given_as else self.how_to_give()})")


def resolve(spec: CheckpointSpec, explicit: Optional[PathLike] = None,
            env: Optional[Mapping[str, str]] = None, given_as: Optional[str] = None) -> Path:
    """The existing local path for ``spec``: ``explicit`` if given, else ``$spec.env_var``."""
    env = os.environ if env is None else env
    raw = explicit if explicit is not None else env.get(spec.env_var) or None
    if raw is None:
        raise spec.error(None, "no checkpoint path", given_as)
    path = Path(raw).expanduser()
    if not path.exists():
        raise spec.error(path, "checkpoint not found", given_as)
    if spec.kind == "file" and not path.is_file():
        raise spec.error(path, "expected a file, found a directory", given_as)
    if spec.kind == "dir" and not path.is_dir():
        raise spec.error(path, "expected a directory", given_as)
    if not os.access(path, os.R_OK):
        raise spec.error(path, "checkpoint is not readable", given_as)
    return path


#: bytes read at a time while hashing a checkpoint (the whole file is hashed, never held in memory)
HASH_CHUNK = 8 << 20
#: ``(path, size, mtime_ns) -> sha256`` of the files this process hashed: each once per process
_hashed: Dict[tuple, str] = {}


def content_sha256(path: Path) -> str:
    """The sha256 of the whole file at ``path``, read in chunks; a file hashed before in this process
    (same path, size and modification time) is not read again."""
    import hashlib

    status = path.stat()
    key = (str(path.resolve()), status.st_size, status.st_mtime_ns)
    if key not in _hashed:
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            for chunk in iter(lambda: handle.read(HASH_CHUNK), b""):
                digest.update(chunk)
        _hashed[key] = digest.hexdigest()
    return _hashed[key]


def identity(path: Path) -> dict:
    """What tells two ranks' checkpoints apart by content, wherever each lies: path, size in bytes
    and the sha256 of the whole file. A folder (a ``save_pretrained`` layout): its files' total size,
    and the sha256 of each file's relative name and content sha256."""
    import hashlib

    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file())
        digest = hashlib.sha256()
        for file in files:
            digest.update(f"{file.relative_to(path).as_posix()}\0{content_sha256(file)}\n".encode())
        return {"path": str(path), "size": sum(p.stat().st_size for p in files), "sha256": digest.hexdigest()}
    return {"path": str(path), "size": path.stat().st_size, "sha256": content_sha256(path)}


def load_state_dict(spec: CheckpointSpec, path: Path, key: Optional[str] = None) -> Dict[str, torch.Tensor]:
    """Tensors of a ``.safetensors`` file or a ``torch.save``d dict (``weights_only=True``).

    ``key``: when the file holds ``{key: state_dict, ...}`` (HPSv2 stores ``{'state_dict': ...}``),
    the nested dict is returned; a top-level ``'state_dict'`` entry is unwrapped in any case.
    A DataParallel ``module.`` prefix is stripped.
    """
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            obj = load_file(str(path), device="cpu")
        else:
            obj = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:  # corrupt zip, truncated pickle, disallowed globals, TorchScript archive...
        raise spec.error(path, f"cannot read checkpoint ({type(exc).__name__}: {_first_line(exc)})") from exc
    for wrapper in (key, "state_dict"):
        if wrapper and isinstance(obj, Mapping) and wrapper in obj and isinstance(obj[wrapper], Mapping):
            obj = obj[wrapper]
    if not isinstance(obj, Mapping) or not obj or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise spec.error(path, "file is not a state dict of tensors")
    return {(k[len("module."):] if k.startswith("module.") else k): v for k, v in obj.items()}


def load_into(spec: CheckpointSpec, path: Path, module: torch.nn.Module, state_dict: Mapping[str, torch.Tensor],
              allow_unexpected: bool = False) -> None:
    """``module.load_state_dict`` that reports architecture mismatches as ``CheckpointError``.

    ``allow_unexpected``: tolerate extra keys (e.g. ImageReward's unused BLIP projection heads);
    missing keys and shape mismatches are always errors, since they mean random weights would score.
    """
    try:
        result = module.load_state_dict(state_dict, strict=not allow_unexpected)
    except RuntimeError as exc:
        raise spec.error(path, f"state dict does not fit the architecture ({_first_line(exc, 400)})") from exc
    if result.missing_keys:
        raise spec.error(path, f"state dict lacks {len(result.missing_keys)} keys, e.g. {result.missing_keys[:3]}")


def _first_line(exc: BaseException, limit: int = 200) -> str:
    text = " ".join(str(exc).split())
    return text[:limit] + ("..." if len(text) > limit else "")


@contextlib.contextmanager
def offline_hub() -> Iterator[None]:
    """Hub libraries offline while a loader runs (restores the caller's environment after)."""
    saved = {k: os.environ.get(k) for k in _OFFLINE_ENV}
    os.environ.update(_OFFLINE_ENV)
    patched = []
    try:
        # huggingface_hub caches HF_HUB_OFFLINE at import; flip the cached flag too if it is loaded.
        import sys

        constants = sys.modules.get("huggingface_hub.constants")
        if constants is not None and hasattr(constants, "HF_HUB_OFFLINE"):
            patched.append((constants, "HF_HUB_OFFLINE", constants.HF_HUB_OFFLINE))
            constants.HF_HUB_OFFLINE = True
        yield
    finally:
        for obj, attr, value in patched:
            setattr(obj, attr, value)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
