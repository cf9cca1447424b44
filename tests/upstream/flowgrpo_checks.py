"""The checks every FlowGRPO target's smoke passes, on the upstream commit its spec is verified on:
a test module subclasses ``FlowGrpoChecks`` with ``target`` and ``upstream_file``; the checkout is
FlowGRPO at 9745241. Each run trains 2 epochs of a tiny model on
upstream's ``jpeg_compressibility`` reward with weight 2 (``avg = 2 * jpeg_compressibility``),
4 samples per process; the objectives of ``--otca`` alone are that reward and a tiny CLIP-T.

The trajectory the credit is checked on is recorded by the test's own probe
(``flowgrpo_trajectory_probe.py``: every step of every sampling call), not read back from the layer."""
from pathlib import Path

import pytest
import torch

from otca_patch.credit import CreditConfig, credit_from_progress, similarity_to_final, step_progress

from .conftest import REPO, cached_runs, run_flowgrpo_smoke

#: FlowGRPO's own normalisation: numpy's population std plus 1e-4
UPSTREAM_NORMALISATION = ("--otca_std_correction", "0", "--otca_adv_eps", "1e-4")
PROBE = f"{Path(__file__).with_name('flowgrpo_trajectory_probe.py')}:TrajectoryRecorder"
BATCH = 4  # samples per process and epoch


def tensor(record, key, dtype=None):
    return torch.tensor(record[key], dtype=dtype)


def sampling_calls(run, rank, num_steps):
    """The probe's sampling calls of ``rank``, one per epoch (eval calls take fewer steps)."""
    calls = torch.load(run.out / f"terms_rank{rank}.pt", weights_only=True)
    return [call for call in calls if call["timesteps"].numel() == num_steps]


def window_start(call) -> int:
    """Where the call's returned window lies among its steps (0 without a window)."""
    if call["window"] is None:
        return 0
    steps, window = call["timesteps"], call["window"]
    starts = [s for s in range(len(steps) - len(window) + 1) if torch.allclose(steps[s:s + len(window)], window)]
    assert len(starts) == 1, (steps, window)
    return starts[0]


class FlowGrpoChecks:
    target = ""
    upstream_file = ""
    num_steps = 4  # the smoke's sampling steps S
    trained_columns = 3  # T

    verified_here = True  # the checkout is the one the spec was verified on: the contract suite shares its runs

    @pytest.fixture(scope="class")
    def checkout(self, flow_grpo_9745241):
        """FlowGRPO at 9745241, where these trainers are verified (SD3's spec holds there too)."""
        return flow_grpo_9745241

    @pytest.fixture(scope="class")
    def runs(self, checkout, target_runs, tmp_path_factory):
        if self.verified_here:
            return target_runs(self.target)
        root = tmp_path_factory.mktemp(self.target)
        model = {"OTCA_TINY_SD3_DIR": str(tmp_path_factory.mktemp("flowgrpo_model") / "tiny_sd3")}
        return cached_runs(lambda name, *flags, **options: run_flowgrpo_smoke(
            checkout, root / name, *flags, env=model, target=self.target, **options))

    def expected_trained_steps(self, call) -> torch.Tensor:
        """``[b, T]``: the step each trained column of the call's samples is."""
        return window_start(call) + torch.arange(self.trained_columns).expand(BATCH, -1)

    def test_observe_mode_trains_bit_identically_to_vanilla(self, runs):
        vanilla, observed = runs("vanilla"), runs("observe", "--otca_observe")
        assert len(vanilla.result["losses"]) == 2 * self.trained_columns
        assert observed.trained == vanilla.trained
        assert [r["step"] for r in observed.log] == [1, 2]
        for record in observed.log:
            assert torch.equal(tensor(record, "advantages"), tensor(record, "upstream_advantages"))

    def test_sum_mode_over_upstreams_weights_reproduces_upstreams_advantages(self, runs):
        vanilla = runs("vanilla")
        summed = runs("sum", "--otca", "--otca_mode", "sum", "--otca_rewards", "jpeg_compressibility",
                      "--otca_objective_weights", "2.0", *UPSTREAM_NORMALISATION)
        for record in summed.log:
            ours, theirs = tensor(record, "advantages"), tensor(record, "upstream_advantages")
            assert ours.shape == theirs.shape == (BATCH, self.trained_columns)
            assert theirs.abs().max() > 0.1
            assert torch.allclose(ours, theirs, rtol=1e-5, atol=1e-5)
        losses, grad_norms, _ = summed.trained
        assert losses == pytest.approx(vanilla.result["losses"], rel=1e-4, abs=1e-6)
        assert grad_norms == pytest.approx(vanilla.result["grad_norms"], rel=1e-4)

    def test_otca_trains_the_engines_credit_over_the_whole_trajectory(self, runs):
        otca = runs("otca", "--otca", "--probe", PROBE)
        calls = sampling_calls(otca, 0, self.num_steps)
        assert [r["step"] for r in otca.log] == [1, 2] and len(calls) == 2
        for record, call in zip(otca.log, calls):
            # TCD's progress from the test's own recording of all S steps
            delta_s = step_progress(similarity_to_final(call["states"]).double())
            assert delta_s.shape == (BATCH, self.num_steps)
            assert torch.allclose(tensor(record, "delta_s", torch.float64), delta_s, atol=1e-6)
            credit = credit_from_progress(tensor(record, "rewards"), delta_s, tensor(record, "group_ids"),
                                          CreditConfig(**record["config"]))
            steps = self.expected_trained_steps(call)
            assert record["trained_steps"] == steps.tolist()
            trained = tensor(record, "advantages", torch.float64)
            assert torch.allclose(trained, credit.advantages.double().gather(1, steps), atol=1e-5)
            assert torch.allclose(tensor(record, "step_weights", torch.float64), credit.step_weights.double(), atol=1e-5)
            assert not torch.allclose(trained[:, 0], trained[:, 1])  # per step, not repeated
            assert record["kept"] == (trained.abs().sum(dim=1) != 0).tolist()
        assert otca.trained != runs("vanilla").trained

    def test_two_processes_get_the_credit_computed_over_the_gathered_batch(self, runs):
        run = runs("otca_2proc", "--otca", "--probe", PROBE, nproc=2)
        calls = {rank: sampling_calls(run, rank, self.num_steps) for rank in (0, 1)}
        for step in (1, 2):
            by_rank = [run.record(step, rank) for rank in (0, 1)]
            delta_s = torch.cat([step_progress(similarity_to_final(calls[rank][step - 1]["states"]).double())
                                 for rank in (0, 1)])
            ids = torch.cat([tensor(r, "group_ids") for r in by_rank])
            assert sorted(ids.tolist()) == [0, 0, 0, 0, 1, 1, 1, 1]  # 2 prompts x 4 images over 2 processes
            credit = credit_from_progress(torch.cat([tensor(r, "rewards") for r in by_rank]), delta_s, ids,
                                          CreditConfig(**by_rank[0]["config"]))
            for rank, record in enumerate(by_rank):  # split back rank-major, as upstream splits
                rows = slice(BATCH * rank, BATCH * rank + BATCH)
                steps = self.expected_trained_steps(calls[rank][step - 1])
                assert torch.allclose(tensor(record, "advantages", torch.float64),
                                      credit.advantages[rows].double().gather(1, steps), atol=1e-5)
                assert record["summary"] == pytest.approx(by_rank[0]["summary"])

    def test_the_run_log_check_script_agrees(self, runs):
        import subprocess
        import sys

        checked = subprocess.run([sys.executable, str(REPO / "scripts" / "check_run_log_credit.py"),
                                  str(runs("otca_2proc", "--otca", "--probe", PROBE, nproc=2).out), "--processes", "2"],
                                 capture_output=True, text=True, timeout=300)
        assert checked.returncode == 0, checked.stderr
        assert checked.stdout.count("match the credit engine") == 2

    def test_doctor_names_the_spec_as_holding(self, checkout):
        import subprocess
        import sys

        doctor = subprocess.run([sys.executable, "-m", "otca_patch.cli", "doctor", str(checkout)], capture_output=True,
                                text=True, timeout=120, cwd=REPO)
        assert f"{self.target}: {self.upstream_file}" in doctor.stdout
        assert f"  {self.target} ({self.upstream_file}): holds" in doctor.stdout
