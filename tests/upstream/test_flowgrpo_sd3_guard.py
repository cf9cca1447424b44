"""FlowGRPO's real ``scripts/train_sd3_GRPO_Guard.py`` ``main()`` (9745241) on the CPU under
``accelerate launch``, 1 and 2 processes, with its normalised ratio on (``config.rationorm``)
(``pytest -m upstream``)."""
import pytest

from .flowgrpo_checks import FlowGrpoChecks

pytestmark = [pytest.mark.upstream, pytest.mark.xdist_group("flowgrpo-sd3-guard")]  # with its contract tests


class TestSd3Guard(FlowGrpoChecks):
    target, upstream_file = "flowgrpo-sd3-guard", "scripts/train_sd3_GRPO_Guard.py"
