"""``otca-patch doctor`` on FlowGRPO 9745241 (``pytest -m upstream``): each GRPO trainer is covered by
a holding spec, or (until its spec lands) listed as uncovered and still called GRPO; DPO and SFT
are "not a GRPO trainer" with no ``--otca_target`` suggestion; nothing suggests a spec that does not hold."""
import subprocess
import sys

import pytest

from otca_patch.hooks.spec import load_specs

from .conftest import REPO

pytestmark = pytest.mark.upstream

#: every GRPO trainer of 9745241 and the target whose spec covers it
GRPO_TRAINERS = {
    "scripts/train_sd3.py": "flowgrpo-sd3",
    "scripts/train_sd3_fast.py": "flowgrpo-sd3-fast",
    "scripts/train_sd3_GRPO_Guard.py": "flowgrpo-sd3-guard",
    "scripts/train_flux.py": "flowgrpo-flux",
    "scripts/train_flux_fast.py": "flowgrpo-flux-fast",
    "scripts/train_flux_kontext.py": "flowgrpo-flux-kontext",
    "scripts/train_qwenimage.py": "flowgrpo-qwenimage",
    "scripts/train_qwenimage_edit.py": "flowgrpo-qwenimage-edit",
    "scripts/train_wan2_1.py": "flowgrpo-wan2-1",
}
#: the targets that must exist today
REQUIRED = {"flowgrpo-sd3", "flowgrpo-sd3-fast", "flowgrpo-sd3-guard", "flowgrpo-flux", "flowgrpo-flux-fast",
            "flowgrpo-flux-kontext", "flowgrpo-qwenimage", "flowgrpo-qwenimage-edit", "flowgrpo-wan2-1"}
NOT_GRPO = ("scripts/train_sd3_dpo.py", "scripts/train_sd3_sft.py")


@pytest.fixture(scope="module")
def report(flow_grpo_9745241):
    done = subprocess.run([sys.executable, "-m", "otca_patch.cli", "doctor", str(flow_grpo_9745241)],
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr  # every spec that applies here holds
    return done.stdout.splitlines()


def test_each_grpo_trainer_has_a_holding_spec_or_awaits_its_own(report):
    by_file = {spec.file: spec.name for spec in load_specs() if spec.upstream == "flow_grpo"}
    assert REQUIRED <= set(by_file.values())
    for file, target in GRPO_TRAINERS.items():
        if file in by_file:
            assert by_file[file] == target, f"{file} is covered by {by_file[file]}, expected {target}"
            assert f"  {target} ({file}): holds" in "\n".join(report)
        else:
            line = next(line for line in report if line.startswith(f"  {file} "))
            assert "not a GRPO trainer" not in line


def test_dpo_and_sft_are_not_grpo_and_get_no_target_suggestion(report):
    for file in NOT_GRPO:
        line = next(line for line in report if line.startswith(f"  {file} "))
        assert line == (f"  {file} (not a GRPO trainer: launch it without --otca; it trains no group advantage "
                        f"OTCA could replace)")


def test_every_suggested_target_holds_on_its_file(flow_grpo_9745241, report):
    from otca_patch.hooks.select import failures

    specs = {spec.name: spec for spec in load_specs()}
    suggested = [line.rsplit("--otca_target ", 1)[1].rstrip(")") for line in report if "--otca_target " in line
                 and line.startswith("  scripts/")]
    for text in suggested:
        name, file = text.split("=", 1)
        assert failures(str(flow_grpo_9745241 / file), specs[name]) == [], text
