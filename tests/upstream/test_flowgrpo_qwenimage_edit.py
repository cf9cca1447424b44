"""FlowGRPO's real ``scripts/train_qwenimage_edit.py`` ``main()`` (9745241) on the CPU under ``torchrun``
(2 processes), through upstream's own FSDP path as Qwen-Image's, rewritten by the layer
(``pytest -m upstream``). Each run trains 2 epochs of a tiny Qwen-Image-Edit conditioned on an input
image per prompt (the 1024 x 1024 condition image upstream hard-codes is 8 x 8 packed latents through
the tiny 64x VAE): 4 sampling steps, an SDE window of 2 per process (the sampler seeds its draw with
the rank), 4 samples per process, 2 prompts (each with its image) x 4, upstream's jpeg_compressibility x 2.
Needs a Qwen2.5-VL transformers as Qwen-Image's (contract.py's ``qwen_transformers``)."""
import pytest

from .test_flowgrpo_qwenimage import QwenImageChecks

pytestmark = [pytest.mark.upstream, pytest.mark.xdist_group("flowgrpo-qwenimage-edit")]  # with its contract tests


class TestFlowGrpoQwenImageEdit(QwenImageChecks):
    target = "flowgrpo-qwenimage-edit"
    upstream_file = "scripts/train_qwenimage_edit.py"
