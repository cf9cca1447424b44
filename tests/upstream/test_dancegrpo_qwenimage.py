"""DanceGRPO's real Qwen-Image ``train_one_step`` on the CPU, rewritten by the layer (``pytest -m upstream``)."""
import pytest

from otca_patch.smoke.dancegrpo_flux import PROMPTS

from .image_trainer_checks import ImageTrainerChecks

pytestmark = pytest.mark.upstream


class TestQwenImage(ImageTrainerChecks):
    target = "dancegrpo-qwenimage"
    upstream_file = "fastvideo/train_grpo_qwenimage.py"

    def image_path(self, rank, index):
        return f"images/qwenimage_{rank}_{index}.png"

    def prompts(self, rank, step, batch, world):
        return [PROMPTS[(rank + step - 1) % len(PROMPTS)]] * batch
