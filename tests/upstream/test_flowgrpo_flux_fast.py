"""FlowGRPO's real ``scripts/train_flux_fast.py`` ``main()`` (9745241) on the CPU under ``accelerate
launch`` (gloo, 2 processes), rewritten by the layer (``pytest -m upstream``). Each run trains 2 epochs
of a tiny FLUX: 4 sampling steps, an SDE window of 2 steps drawn per sampling batch in steps 0 .. 3
(ODE steps elsewhere), 4 samples per process, 2 prompts x 4 images, upstream's jpeg_compressibility x 2.
The credit is over the whole trajectory, recorded here independently of the layer; each trained
column is the window step the sampler ran with noise."""
import pytest
import torch

from .flowgrpo_trainer_checks import FlowTrainerChecks

pytestmark = [pytest.mark.upstream, pytest.mark.xdist_group("flowgrpo-flux-fast")]  # with its contract tests


class TestFlowGrpoFluxFast(FlowTrainerChecks):
    target = "flowgrpo-flux-fast"
    upstream_file = "scripts/train_flux_fast.py"
    window = 2

    def test_windows_move_between_batches(self, runs):
        """The window start is drawn per sampler call: over 2 epochs x 2 processes more than one occurs
        (the seed makes this run's draws fixed), so a layer reading leading columns would fail above."""
        recorded = self.rollouts(runs("otca", "--otca"))
        starts = {int(torch.nonzero(levels > 0)[0]) for r in recorded for levels in r["noise_levels"]}
        assert len(starts) > 1
