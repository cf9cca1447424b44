"""FlowGRPO's real ``scripts/train_flux.py`` ``main()`` (9745241) on the CPU under ``accelerate launch``
(gloo, 2 processes: upstream's FLUX loop reads DDP's ``transformer.module``), rewritten by the layer
(``pytest -m upstream``). Each run trains 2 epochs of a tiny FLUX (4 samples per process, 4 sampling
steps, T = 3 trained in order) on upstream's jpeg_compressibility with weight 2; 2 prompts x 4 images."""
import pytest
import torch

from .flowgrpo_trainer_checks import FlowTrainerChecks, flow_grpo_newer  # noqa: F401 (fixture)

pytestmark = pytest.mark.upstream


class TestFlowGrpoFlux(FlowTrainerChecks):
    target = "flowgrpo-flux"
    upstream_file = "scripts/train_flux.py"
    model_env = "OTCA_TINY_FLUX_DIR"
    trained_columns = 3  # int(4 sampling steps * timestep_fraction 0.75)

    def trained_steps(self, trajectory, noise_levels):
        assert trajectory.shape[1] == 4 + 1 and bool((noise_levels > 0).all())  # SDE steps throughout
        return torch.arange(self.trained_columns).expand(trajectory.shape[0], -1)
