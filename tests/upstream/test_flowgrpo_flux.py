"""FlowGRPO's real ``scripts/train_flux.py`` ``main()`` (9745241) on the CPU under ``accelerate launch``
(gloo, 2 processes: upstream's FLUX loop reads DDP's ``transformer.module``), rewritten by the layer
(``pytest -m upstream``). Each run trains 2 epochs of a tiny FLUX (4 samples per process, 4 sampling
steps, T = 3 trained in order) on upstream's jpeg_compressibility with weight 2; 2 prompts x 4 images."""
import pytest

from .flowgrpo_trainer_checks import FlowTrainerChecks

pytestmark = [pytest.mark.upstream, pytest.mark.xdist_group("flowgrpo-flux")]  # with its contract tests


class TestFlowGrpoFlux(FlowTrainerChecks):
    target = "flowgrpo-flux"
    upstream_file = "scripts/train_flux.py"
