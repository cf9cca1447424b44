"""FlowGRPO's real ``scripts/train_qwenimage.py`` ``main()`` (9745241) on the CPU under ``torchrun`` (2
processes), through upstream's own FSDP path (``flow_grpo/fsdp_utils.py``; gloo and the CPU as FSDP's
device in the smoke process), rewritten by the layer (``pytest -m upstream``). Each run trains 2
epochs of a tiny Qwen-Image: 4 sampling steps, an SDE window of 2 (the sampler seeds its draw with
process index 0), 4 samples per process, 2 prompts x 4 images, upstream's jpeg_compressibility x 2.

Qwen-Image's text encoder is Qwen2.5-VL: transformers 4.49 or later, in this environment or in the
folder ``$OTCA_QWEN_TRANSFORMERS`` (default ``.venv/qwen-transformers``, which scripts/setup.sh fills with
``pip install --target DIR --no-deps transformers==4.51.3 'tokenizers>=0.21,<0.22'``), imported
first by the smoke processes only."""
import importlib.util
import os

import pytest

import upstream_snapshots as snapshots

from .conftest import REPO
from .flowgrpo_trainer_checks import FlowTrainerChecks, flow_grpo_newer  # noqa: F401 (fixture)

pytestmark = pytest.mark.upstream
OVERLAY = "OTCA_QWEN_TRANSFORMERS"


def qwen_transformers() -> list:
    """The folder to import a Qwen2.5-VL transformers from ([] when this environment has one)."""
    if importlib.util.find_spec("transformers.models.qwen2_5_vl") is not None:
        return []
    folder = os.environ.get(OVERLAY) or str(REPO / ".venv" / "qwen-transformers")
    if folder and os.path.isdir(os.path.join(folder, "transformers", "models", "qwen2_5_vl")):
        return [folder]
    snapshots.missing(f"Qwen-Image needs transformers with Qwen2.5-VL (4.49+): this environment's is older and "
                      f"neither ${OVERLAY} nor .venv/qwen-transformers holds one (scripts/setup.sh installs it)")


class QwenImageChecks(FlowTrainerChecks):
    """The Qwen-Image trainers (Qwen-Image, Qwen-Image-Edit): torchrun, an SDE window of 2, a Qwen2.5-VL transformers."""

    launcher = "torchrun"
    window = 2

    def python_path(self) -> list:
        return qwen_transformers()


class TestFlowGrpoQwenImage(QwenImageChecks):
    target = "flowgrpo-qwenimage"
    upstream_file = "scripts/train_qwenimage.py"
    model_env = "OTCA_TINY_QWENIMAGE_DIR"
