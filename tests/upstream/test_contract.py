"""The contract of every target with a smoke run, on the upstream file its spec was verified on
(contract.py: which targets, how their runs are launched, the mutation). ``pytest -m upstream``."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from .conftest import REPO, doctor, with_startup_hook
from .contract import checkout, contract_params, doctor_section, family, mutated_copy, named_objectives, trained

pytestmark = pytest.mark.upstream
TARGETS = contract_params()


@pytest.mark.parametrize("spec", TARGETS)
def test_doctor_holds_on_the_verified_checkout(spec):
    checked = doctor(checkout(spec))
    section = doctor_section(checked.stdout, spec)
    assert "identical to the file the spec was verified on" in section and "FAIL" not in section, section
    assert f"{spec.name} ({spec.file}): holds" in checked.stdout


@pytest.mark.parametrize("spec", TARGETS)
def test_a_mutated_upstream_file_stops_otca_and_doctor_reports_it(spec, tiny_models, tmp_path):
    copy, entry = mutated_copy(checkout(spec), tmp_path, spec)
    run, flags = family(spec, tiny_models)
    refused = run(copy, tmp_path / "out", "--otca", check=False)
    status = refused.completed.returncode
    assert (status == flags.refused if flags.refused else status != 0), refused.completed.stderr[-3000:]
    assert refused.result is None and not refused.log and "smoke: failed" in refused.completed.stderr
    stderr = refused.completed.stderr
    for part in (spec.file, f"function {entry.function}", "times, expected exactly", spec.verified_commit):
        assert part in stderr, (part, stderr[-3000:])
    checked = doctor(copy)
    assert checked.returncode == 1
    section = doctor_section(checked.stdout, spec)
    assert "differs from the file the spec was verified on" in section
    row = next(line for line in section.splitlines() if line.strip().split()[1:2] == [entry.name])
    assert "FAIL: anchor found" in row and f"expected exactly {entry.count}" in row, row


@pytest.mark.parametrize("spec", TARGETS)
def test_vanilla_parity_with_the_layer_present_but_not_asked_for(spec, target_runs, tmp_path):
    """The smoke run takes its flags as a launched process does ($OTCA_PATCH_ARGS, with the startup
    hook on the path): without --otca the upstream file runs untouched."""
    runs, flags = target_runs(spec.name), family(spec, tmp_path)[1]
    vanilla = runs("vanilla", *flags.vanilla)
    present = runs("present", *flags.steps, env=with_startup_hook("--otca_mode tcd"))
    assert trained(vanilla) and trained(present) == trained(vanilla)
    assert not present.log and not (present.out / "run_log.jsonl").exists()


@pytest.mark.parametrize("spec", TARGETS)
def test_observe_mode_trains_bit_identically_and_logs_the_credit(spec, target_runs, tmp_path):
    runs, flags = target_runs(spec.name), family(spec, tmp_path)[1]
    vanilla, observed = runs("vanilla", *flags.vanilla), runs("observe", *flags.steps, "--otca_observe")
    assert trained(observed) == trained(vanilla)
    world = observed.log[0]["world_size"]
    assert sorted((r["step"], r["rank"]) for r in observed.log) == [(s, r) for s in (1, 2) for r in range(world)]
    for record in observed.log:
        assert record["spec"]["target"] == spec.name and record["spec"]["upstream"] == spec.upstream
        assert named_objectives(record["objectives"], spec) == list(spec.smoke.objectives)
        used, upstream = torch.tensor(record["advantages"]), torch.tensor(record["upstream_advantages"])
        # the trainer used upstream's advantage: per sample (broadcast over steps) or per step
        assert torch.equal(used, upstream.reshape(*upstream.shape, *[1] * (used.dim() - upstream.dim())).expand_as(used))


def test_a_new_targets_spec_brings_its_contract_tests(tmp_path):
    """A made-up target, registered as a real one is (a spec file in the patches folder), gets every
    contract test collected, with no test file of its own."""
    from otca_patch.hooks.spec import PACKAGED_PATCHES_DIR

    patches = tmp_path / "patches"
    shutil.copytree(PACKAGED_PATCHES_DIR, patches)
    text = (patches / "dancegrpo" / "train_grpo_flux.toml").read_text()
    (patches / "dancegrpo" / "train_grpo_flux_madeup.toml").write_text(
        text.replace('"dancegrpo-flux"', '"dancegrpo-flux-madeup"').replace(
            "fastvideo/train_grpo_flux.py", "fastvideo/train_grpo_flux_madeup.py"))
    collected = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                                str(Path(__file__))], capture_output=True, text=True, timeout=300, cwd=REPO,
                               env={**os.environ, "OTCA_PATCHES_DIR": str(patches)})
    assert collected.returncode == 0, collected.stdout[-3000:] + collected.stderr[-3000:]
    madeup = [line for line in collected.stdout.splitlines() if "[dancegrpo-flux-madeup]" in line]
    contract = [name for name, value in globals().items() if name.startswith("test_") and hasattr(value, "pytestmark")]
    assert sorted(line.split("::")[1].split("[")[0] for line in madeup) == sorted(contract)
