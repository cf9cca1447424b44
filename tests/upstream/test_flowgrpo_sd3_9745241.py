"""flowgrpo-sd3's spec, verified on ac4c86e (test_flowgrpo_sd3.py), holds on 9745241 too: the same
checks on FlowGRPO's ``scripts/train_sd3.py`` at 9745241 (``pytest -m upstream``)."""
import pytest

from .flowgrpo_checks import FlowGrpoChecks

pytestmark = pytest.mark.upstream


class TestSd3At9745241(FlowGrpoChecks):
    target, upstream_file = "flowgrpo-sd3", "scripts/train_sd3.py"
    verified_here = False  # verified on ac4c86e: the contract suite runs it there
