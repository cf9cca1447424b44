"""FlowGRPO's real ``scripts/train_sd3_GRPO_Guard.py`` ``main()`` (9745241) on the CPU under
``accelerate launch``, 1 and 2 processes, with its normalised ratio on (``config.rationorm``)
(``pytest -m upstream``)."""
import pytest

from .flowgrpo_checks import FlowGrpoChecks

pytestmark = pytest.mark.upstream


@pytest.fixture(scope="module")
def checkout(flow_grpo_9745241):
    return flow_grpo_9745241


class TestSd3Guard(FlowGrpoChecks):
    target, upstream_file = "flowgrpo-sd3-guard", "scripts/train_sd3_GRPO_Guard.py"
