"""FlowGRPO's real ``scripts/train_qwenimage.py`` ``main()`` (9745241) on the CPU under ``torchrun`` (2
processes), through upstream's own FSDP path (``flow_grpo/fsdp_utils.py``; gloo and the CPU as FSDP's
device in the smoke process), rewritten by the layer (``pytest -m upstream``). Each run trains 2
epochs of a tiny Qwen-Image: 4 sampling steps, an SDE window of 2 (the sampler seeds its draw with
process index 0), 4 samples per process, 2 prompts x 4 images, upstream's jpeg_compressibility x 2.

Qwen-Image's text encoder is Qwen2.5-VL: transformers 4.49 or later, in this environment or in the
folder ``$OTCA_QWEN_TRANSFORMERS`` (default ``.venv/qwen-transformers``, which scripts/setup.sh fills with
``pip install --target DIR --no-deps transformers==4.51.3 'tokenizers>=0.21,<0.22'``), imported
first by the smoke processes only."""
import pytest

from .flowgrpo_trainer_checks import FlowTrainerChecks

pytestmark = [pytest.mark.upstream, pytest.mark.xdist_group("flowgrpo-qwenimage")]  # with its contract tests


class QwenImageChecks(FlowTrainerChecks):
    """The Qwen-Image trainers (Qwen-Image, Qwen-Image-Edit): an SDE window of 2 (launched under torchrun,
    with a Qwen2.5-VL transformers: contract.py's launcher)."""

    window = 2


class TestFlowGrpoQwenImage(QwenImageChecks):
    target = "flowgrpo-qwenimage"
    upstream_file = "scripts/train_qwenimage.py"
