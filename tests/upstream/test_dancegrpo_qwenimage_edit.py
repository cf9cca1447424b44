"""DanceGRPO's real Qwen-Image-Edit ``train_one_step`` on the CPU, rewritten by the layer (``pytest -m upstream``)."""
import pytest

from . import test_dancegrpo_qwenimage as qwen  # a module, so its test class is not collected here too

pytestmark = [pytest.mark.upstream, pytest.mark.xdist_group("dancegrpo-qwenimage-edit")]  # with its contract tests


class TestQwenImageEdit(qwen.TestQwenImage):
    """Everything as for Qwen-Image (same tiny models, prompts and saved file names), plus a
    conditioning image per prompt."""

    target = "dancegrpo-qwenimage-edit"
    upstream_file = "fastvideo/train_grpo_qwenimage_edit.py"
