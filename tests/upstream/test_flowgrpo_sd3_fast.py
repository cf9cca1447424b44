"""FlowGRPO's real ``scripts/train_sd3_fast.py`` ``main()`` (9745241) on the CPU under ``accelerate
launch``, 1 and 2 processes: 6 sampling steps, an SDE window of 2 at a random start in 0 .. 2;
the credit over all 6 steps, each trained column read at its window step (``pytest -m upstream``)."""
import pytest

from .flowgrpo_checks import FlowGrpoChecks

pytestmark = [pytest.mark.upstream, pytest.mark.xdist_group("flowgrpo-sd3-fast")]  # with its contract tests


class TestSd3Fast(FlowGrpoChecks):
    target, upstream_file = "flowgrpo-sd3-fast", "scripts/train_sd3_fast.py"
    num_steps, trained_columns = 6, 2
