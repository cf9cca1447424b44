"""FlowGRPO's real ``scripts/train_flux_kontext.py`` ``main()`` (9745241) on the CPU under ``accelerate
launch`` (gloo, 2 processes), rewritten by the layer (``pytest -m upstream``). Each run trains 2 epochs
of a tiny FLUX-Kontext conditioned on an input image per prompt (4 samples per process, 4 sampling
steps, T = 3 trained in order), upstream's jpeg_compressibility x 2; 2 prompts (each with its image) x 4."""
import pytest

from .flowgrpo_trainer_checks import FlowTrainerChecks

pytestmark = [pytest.mark.upstream, pytest.mark.xdist_group("flowgrpo-flux-kontext")]  # with its contract tests


class TestFlowGrpoFluxKontext(FlowTrainerChecks):
    target = "flowgrpo-flux-kontext"
    upstream_file = "scripts/train_flux_kontext.py"
