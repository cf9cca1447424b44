"""DanceGRPO's real FLUX LoRA ``train_one_step`` on the CPU, rewritten by the layer (``pytest -m upstream``)."""
import pytest

from otca_patch.tiny_models.text import IMAGE_PROMPTS as PROMPTS

from .image_trainer_checks import ImageTrainerChecks

pytestmark = [pytest.mark.upstream, pytest.mark.xdist_group("dancegrpo-flux-lora")]  # with its contract tests


class TestFluxLora(ImageTrainerChecks):
    target = "dancegrpo-flux-lora"
    upstream_file = "fastvideo/train_grpo_flux_lora.py"

    def image_path(self, rank, index):
        return f"images/flux_{rank}_{index}.png"

    def prompts(self, rank, step, batch, world):
        return [PROMPTS[(rank + step - 1) % len(PROMPTS)]] * batch
