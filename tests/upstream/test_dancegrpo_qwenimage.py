"""DanceGRPO's real Qwen-Image ``train_one_step`` on the CPU, rewritten by the layer (``pytest -m upstream``)."""
import pytest

from otca_patch.tiny_models.text import IMAGE_PROMPTS as PROMPTS

from .image_trainer_checks import ImageTrainerChecks

pytestmark = [pytest.mark.upstream, pytest.mark.xdist_group("dancegrpo-qwenimage")]  # with its contract tests


class TestQwenImage(ImageTrainerChecks):
    target = "dancegrpo-qwenimage"
    upstream_file = "fastvideo/train_grpo_qwenimage.py"
    # the transformer trains under FSDP's bf16 mixed precision, as upstream's main sets it: the engine's
    # advantage (float32 rounding away from upstream's) can flip bf16 roundings in the backward pass
    # (Qwen-Image-Edit: 3.5e-5 of the first gradient norm), and later steps sample from those weights
    grad_norm_rtol, grad_norm_steps = 1e-3, 1
    loss_rtol = 1e-5

    def image_path(self, rank, index):
        return f"images/qwenimage_{rank}_{index}.png"

    def prompts(self, rank, step, batch, world):
        return [PROMPTS[(rank + step - 1) % len(PROMPTS)]] * batch
