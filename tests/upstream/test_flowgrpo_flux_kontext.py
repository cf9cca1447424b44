"""FlowGRPO's real ``scripts/train_flux_kontext.py`` ``main()`` (9745241) on the CPU under ``accelerate
launch`` (gloo, 2 processes), rewritten by the layer (``pytest -m upstream``). Each run trains 2 epochs
of a tiny FLUX-Kontext conditioned on an input image per prompt (4 samples per process, 4 sampling
steps, T = 3 trained in order), upstream's jpeg_compressibility x 2; 2 prompts (each with its image) x 4."""
import pytest

from .flowgrpo_trainer_checks import FlowTrainerChecks, flow_grpo_newer  # noqa: F401 (fixture)

pytestmark = pytest.mark.upstream


class TestFlowGrpoFluxKontext(FlowTrainerChecks):
    target = "flowgrpo-flux-kontext"
    upstream_file = "scripts/train_flux_kontext.py"
    model_env = "OTCA_TINY_FLUX_KONTEXT_DIR"
