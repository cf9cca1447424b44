"""FlowGRPO's real ``scripts/train_wan2_1.py`` ``main()`` (9745241) on the CPU under ``accelerate launch``
(gloo, 2 processes), rewritten by the layer (``pytest -m upstream``). Each run trains 2 epochs (after
upstream's two epochs that sample nothing) of a tiny Wan2.1: 5 frames at 32 x 32 pixels, 4 sampling
steps, 3 trained (timestep_fraction 0.75), 4 videos per process, 2 prompts x 4 videos, upstream's
``video_ocr`` x 2 (PaddleOCR's engine stood in by the smoke: ``stand_ins.flowgrpo.StandInOcr``).

Upstream's advantage is ``[B, S]``, one column per sampling step; the layer's is the engine's credit
in that shape (column j is step j), and the loop trains the first T columns. The registry objective
(CLIP-T) is recomputed here on 4 evenly spaced frames of each recorded video, averaged per video."""
import pytest
import torch

from .flowgrpo_trainer_checks import FlowTrainerChecks

pytestmark = [pytest.mark.upstream, pytest.mark.xdist_group("flowgrpo-wan2-1")]  # with its contract tests
VIDEO_FRAMES = 4  # --otca_video_frames' default


class TestFlowGrpoWan(FlowTrainerChecks):
    target = "flowgrpo-wan2-1"
    upstream_file = "scripts/train_wan2_1.py"
    upstream_reward = "video_ocr"

    def trained_steps(self, trajectory: torch.Tensor, noise_levels: torch.Tensor) -> torch.Tensor:
        """Every column of upstream's ``[B, S]`` advantage is the step of its index (SDE steps throughout)."""
        assert trajectory.shape[1] == self.sampling_steps + 1 and bool((noise_levels > 0).all())
        return torch.arange(self.sampling_steps).expand(trajectory.shape[0], -1)

    def registry_scores(self, model, videos: torch.Tensor, prompts: list) -> torch.Tensor:
        """An image model's score of a video: the mean over frames 0, 1, 3, 4 of its 5 (evenly spaced)."""
        assert videos.dim() == 5 and videos.shape[1] == 5
        frames = [0, 1, 3, 4]
        scores = [model.score(videos[:, f], prompts).double() for f in frames]
        return torch.stack(scores, dim=1).mean(dim=1)

    def test_the_loop_trains_the_first_T_columns_of_each_epoch(self, runs):
        """One training batch per epoch and process: T = 3 backward passes each, so 6 over 2 epochs."""
        for run in (runs("vanilla"), runs("otca", "--otca")):
            assert [len(losses) for losses in self.per_rank(run, "losses")] == [2 * self.trained_columns] * self.nproc
        logged = runs("otca", "--otca").record(1, 0)["advantages"]
        assert len(logged[0]) == self.sampling_steps  # upstream's shape: a column per sampling step
