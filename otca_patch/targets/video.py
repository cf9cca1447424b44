"""What the DanceGRPO video targets share: each decoded video kept for the registry objectives, and
the ``[B, K]`` reward matrix over upstream's reward(s) and those objectives."""
from __future__ import annotations

from typing import Optional

import torch

from .common import GrpoRuntime, frames_to_tensor


class VideoGrpoRuntime(GrpoRuntime):
    """A DanceGRPO runtime whose trainer decodes one video per rollout (HunyuanVideo, Wan, SkyReels)."""

    def reset(self) -> None:
        super().reset()
        self.videos, self.prompts = [], []

    # ---- hook: collect_decoded_videos (sample_reference_model)
    def collect_video(self, decoded_video, captions) -> None:
        """decoded_video: one video as upstream decodes it, numpy ``[F, H, W, 3]`` in [0, 1]; kept
        only when a registry objective will score it."""
        if self.objectives.needs_images:
            self.videos.append(frames_to_tensor(decoded_video))
            self.prompts.append(captions[0])

    def video_rewards(self, upstream, rows: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``[B, K]``: upstream's reward(s) of the rows kept (``rows``: rollout indices, default all)
        and the registry objectives on those rows' videos, image rewards over ``--otca_video_frames``."""
        videos, prompts = (torch.stack(self.videos) if self.videos else None), self.prompts
        if rows is not None and videos is not None:
            videos, prompts = videos[rows.cpu()], [prompts[i] for i in rows.tolist()]
        return self.objectives.video_matrix(upstream, videos, prompts, self.config.otca_video_frames)
