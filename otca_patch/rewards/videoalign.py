"""``videoalign``: VideoAlign's three video rewards -- visual quality (VQ), motion quality (MQ) and
text alignment (TA) -- through the ``VideoVLMRewardInference`` class DanceGRPO vendors
(``fastvideo/models/videoalign/inference.py``), so a video run gets three objectives.

The upstream class reads videos from files, so a ``[B, F, 3, H, W]`` batch is written to temporary
mp4 files (OpenCV, ``fps=`` frames per second, 24 by default as DanceGRPO's Hunyuan scripts store
them) and scored in one ``reward(paths, prompts, use_norm=...)`` call. ``score_all`` gives
``[B, 3]`` (VQ, MQ, TA); ``score`` gives their sum, upstream's "Overall".

Import: the DanceGRPO checkout must be importable -- ``$OTCA_UPSTREAM_DANCEGRPO`` or
``<repo>/upstream/DanceGRPO`` is put on ``sys.path`` -- with VideoAlign's own dependencies
(Qwen2-VL via transformers, peft, trl, datasets, decord). Checkpoint (``checkpoint=`` /
``OTCA_CKPT_VIDEOALIGN``): the VideoAlign folder with ``model_config.json`` and its
``checkpoint-*`` weights (huggingface KwaiVGI/VideoReward).
"""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import List, Optional, Union

import torch

from .base import RewardModel
from .checkpoints import CheckpointSpec, PathLike, offline_hub, resolve
from .clip_libs import installed

SPEC = CheckpointSpec(
    model="videoalign",
    env_var="OTCA_CKPT_VIDEOALIGN",
    expected="the VideoAlign checkpoint folder (model_config.json + checkpoint-*/ from huggingface "
             "KwaiVGI/VideoReward)",
    kind="dir",
)
UPSTREAM_ENV = "OTCA_UPSTREAM_DANCEGRPO"
#: without the variable: the current directory, as DanceGRPO's trainers are launched from their checkout
DEFAULT_UPSTREAM = Path(".")
INFERENCE_MODULE = "fastvideo.models.videoalign.inference"
#: VideoAlign's reward keys, in column order.
OBJECTIVES = ("VQ", "MQ", "TA")


def upstream_root(env=None) -> Path:
    """The DanceGRPO checkout to import from; ImportError naming both places if there is none."""
    env = os.environ if env is None else env
    root = (Path(env[UPSTREAM_ENV]).expanduser() if env.get(UPSTREAM_ENV) else DEFAULT_UPSTREAM).resolve()
    if not (root / "fastvideo" / "models" / "videoalign" / "inference.py").is_file():
        raise ImportError(
            f"reward model 'videoalign' wraps DanceGRPO's vendored VideoAlign, but no DanceGRPO checkout with "
            f"fastvideo/models/videoalign/inference.py was found at {root}; set {UPSTREAM_ENV} to a DanceGRPO "
            f"checkout or run from one")
    return root


def import_inference_class():
    """``VideoVLMRewardInference`` from the DanceGRPO checkout (the adapter's only import of upstream code)."""
    root = str(upstream_root())
    if root not in sys.path:
        sys.path.insert(0, root)
    try:
        import importlib

        module = importlib.import_module(INFERENCE_MODULE)
    except ImportError as exc:
        raise ImportError(
            f"reward model 'videoalign': importing {INFERENCE_MODULE} from {root} failed ({exc}); VideoAlign's "
            f"modules also import trl and datasets, which DanceGRPO does not declare: "
            f"pip install \"otca-patch[upstream]\" trl datasets pandas") from exc
    return module.VideoVLMRewardInference


def write_videos(videos: torch.Tensor, folder: Path, fps: float) -> List[str]:
    """``[B, F, 3, H, W]`` in [0, 1] -> B mp4 files in ``folder``; their absolute paths."""
    import cv2
    import numpy as np

    frames = (videos.detach().float().cpu().clamp(0, 1) * 255).round().to(torch.uint8)
    frames = frames.permute(0, 1, 3, 4, 2).numpy()  # [B, F, H, W, 3] RGB
    paths = []
    for i, clip in enumerate(frames):
        path = folder / f"sample_{i:04d}.mp4"
        h, w = clip.shape[1:3]
        writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), float(fps), (w, h))
        if not writer.isOpened():
            raise RuntimeError(f"OpenCV cannot open an mp4 writer for {path}")
        for frame in clip:
            writer.write(np.ascontiguousarray(frame[:, :, ::-1]))  # OpenCV wants BGR
        writer.release()
        paths.append(str(path.resolve()))
    return paths


def check_weights(folder: Path) -> None:
    """Before upstream touches the folder: it needs a ``checkpoint-*`` subfolder (upstream indexes the
    newest one and fails with a bare IndexError otherwise), and every ``.pth`` in one must load with
    ``weights_only=True``. Upstream's own ``torch.load`` passes no ``weights_only``: with torch < 2.6 or
    ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1`` it would unpickle (and run) arbitrary code; a file that
    passed here holds plain tensors only. Raises ``CheckpointError`` naming the file."""
    checkpoints = sorted(p for p in folder.glob("checkpoint-*") if p.is_dir())
    if not checkpoints:
        raise SPEC.error(folder, "no checkpoint-* folder (VideoAlign's weights) in the folder")
    for path in sorted(p for c in checkpoints for p in c.glob("*.pth")):
        try:
            torch.load(str(path), map_location="cpu", weights_only=True)
        except Exception as exc:  # a pickle with code in it, a truncated file, ...
            raise SPEC.error(path, f"{path.name} does not load with weights_only=True, so upstream is not allowed to "
                                   f"unpickle it ({type(exc).__name__}: {' '.join(str(exc).split())[:200]})") from exc


class VideoAlignReward(RewardModel):
    checkpoint_slots = (("checkpoint", SPEC, True),)
    """VideoAlign VQ / MQ / TA. ``score_all -> [B, 3]``; ``score -> [B]`` (their sum)."""

    name = "videoalign"
    output_names = ("videoalign.vq", "videoalign.mq", "videoalign.ta")
    modality = "video"

    @classmethod
    def missing_packages(cls, paths):
        lacking = [module for module in ("trl", "datasets") if not installed(module)]
        if not lacking:
            return None
        return (f"reward model 'videoalign' needs {' and '.join(lacking)}, which DanceGRPO's vendored "
                f"VideoAlign imports: pip install 'otca-patch[videoalign]'")

    def __init__(self, checkpoint: Optional[PathLike] = None, device: Union[str, torch.device] = "cpu",
                 dtype: torch.dtype = torch.bfloat16, fps: float = 24.0, use_norm: bool = True,
                 num_frames: Optional[int] = None):
        super().__init__(device, dtype)
        self.checkpoint = resolve(SPEC, checkpoint)
        if not (self.checkpoint / "model_config.json").is_file():
            raise SPEC.error(self.checkpoint, "model_config.json not found in the folder")
        self.fps, self.use_norm, self.num_frames = float(fps), bool(use_norm), num_frames
        check_weights(self.checkpoint)
        inference_cls = import_inference_class()
        with offline_hub():
            try:
                self.inferencer = inference_cls(str(self.checkpoint), device=str(self.device), dtype=dtype)
            except (OSError, ValueError, KeyError, RuntimeError) as exc:
                raise SPEC.error(self.checkpoint, f"VideoAlign failed to load ({type(exc).__name__}: "
                                                  f"{' '.join(str(exc).split())[:300]})") from exc

    def to(self, device: Union[str, torch.device]) -> "VideoAlignReward":
        """Upstream's inferencer keeps its model and the device its inputs go to."""
        self.device = torch.device(device)
        self.inferencer.model.to(self.device)
        self.inferencer.device = str(self.device)
        return self

    def _rewards(self, videos: torch.Tensor, prompts: List[str]) -> torch.Tensor:
        with tempfile.TemporaryDirectory(prefix="otca_videoalign_") as tmp:
            paths = write_videos(videos, Path(tmp), self.fps)
            rewards = self.inferencer.reward(paths, prompts, num_frames=self.num_frames, use_norm=self.use_norm)
        if len(rewards) != len(paths):
            raise RuntimeError(f"VideoAlign returned {len(rewards)} rewards for {len(paths)} videos")
        return torch.tensor([[float(r[k]) for k in OBJECTIVES] for r in rewards],
                            dtype=torch.float32, device=self.device)

    def _score_all(self, videos: torch.Tensor, prompts: List[str]) -> torch.Tensor:
        return self._rewards(videos, prompts)

    def _score(self, videos: torch.Tensor, prompts: List[str]) -> torch.Tensor:
        return self._rewards(videos, prompts).sum(dim=1)
