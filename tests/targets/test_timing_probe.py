"""The objective-timing probe of the trainers (``targets/timing_probe.py``, docs/credit.md 9.3): its
flags, its schedule, the map it pools over the last W probes, and which targets take it."""
import math
import shutil

import pytest
import torch

from otca_patch.config import OtcaConfig
from otca_patch.credit.timing import decided
from otca_patch.hooks.spec import PACKAGED_PATCHES_DIR, load_specs
from otca_patch.objective_set import UpstreamRewards
from otca_patch.target_options import PROBE_FLAG
from otca_patch.targets.registry import runtime_for
from otca_patch.targets.timing_probe import TimingProbe, heatmap

PROBE = dict(otca=True, otca_objective_timing="probe")


def probe(tmp_path, **flags) -> TimingProbe:
    return TimingProbe(OtcaConfig(**{**PROBE, "otca_log_dir": str(tmp_path), **flags}))


class Objectives:
    """Two registry columns that read the decoded sample itself (a [2] tensor), one upstream column."""

    names = ("upstream", "a", "b")
    keys = {"upstream": None}
    upstream = UpstreamRewards()

    def registry_matrix(self, samples, prompts, frames):
        assert len(samples) == len(prompts)
        values = torch.stack(list(samples))
        return torch.cat([torch.full((len(samples), 1), math.nan), values], dim=1)


def roll_out(probe_, predictions, upstream=None):
    """The sampler's hooks on ``predictions [B, T, 2]``, one sample per chunk as DanceGRPO samples;
    each step's "decoded" sample is the prediction itself."""
    for sample in predictions:
        for index, prediction in enumerate(sample):
            probe_.keep(prediction[None], index)
        probe_.score(lambda x: list(x), ["a prompt"], Objectives(), upstream=upstream)


@pytest.mark.parametrize("flag, value, message", [
    ("otca_probe_every", 0, "--otca_probe_every: needs an integer >= 1, got 0"),
    ("otca_probe_samples", 1, "--otca_probe_samples: needs an integer >= 2, got 1"),
    ("otca_probe_window", -2, "--otca_probe_window: needs an integer >= 1, got -2"),
])
def test_bad_flag_values_stop_the_runtime_with_one_line(tmp_path, flag, value, message):
    with pytest.raises(ValueError) as raised:
        runtime_for("dancegrpo-flux", OtcaConfig(**PROBE, otca_log_dir=str(tmp_path), **{flag: value}))
    assert str(raised.value) == message


def test_probe_flags_without_the_option_are_refused(tmp_path):
    with pytest.raises(ValueError) as raised:
        runtime_for("dancegrpo-flux", OtcaConfig(otca=True, otca_probe_window=3, otca_log_dir=str(tmp_path)))
    assert str(raised.value) == ("--otca_probe_window: schedules the objective-timing probe, which runs only with "
                                 "--otca_objective_timing probe")


@pytest.mark.parametrize("target", ["dancegrpo-hunyuan", "dancegrpo-sd", "flowgrpo-flux", "mixgrpo-flux"])
def test_targets_without_the_probe_refuse_the_option_and_its_flags(tmp_path, target):
    with pytest.raises(ValueError, match=rf"^--otca_objective_timing: target {target} has no probe"):
        runtime_for(target, OtcaConfig(**PROBE, otca_log_dir=str(tmp_path)))
    with pytest.raises(ValueError, match=rf"^--otca_probe_every: not a flag of target {target}\b"):
        runtime_for(target, OtcaConfig(otca=True, otca_probe_every=3, otca_log_dir=str(tmp_path)))


def test_the_refusal_names_the_targets_whose_spec_lists_the_probe(tmp_path, monkeypatch):
    """The shipped probing targets, and a made-up one registered by its spec alone (extending the FLUX
    skeleton with the probe) joins them."""
    with pytest.raises(ValueError) as refused:
        runtime_for("dancegrpo-sd", OtcaConfig(**PROBE, otca_log_dir=str(tmp_path)))
    shipped = "(dancegrpo-flux, dancegrpo-flux-kontext, dancegrpo-wan, flowgrpo-sd3)"
    assert shipped in str(refused.value)
    patches = tmp_path / "patches"
    shutil.copytree(PACKAGED_PATCHES_DIR, patches)
    text = (patches / "dancegrpo" / "train_grpo_flux.toml").read_text()
    assert 'extends = "dancegrpo/_flux_probe.toml"' in text
    (patches / "dancegrpo" / "train_grpo_flux_madeup.toml").write_text(
        text.replace('"dancegrpo-flux"', '"dancegrpo-flux-madeup"').replace(
            "fastvideo/train_grpo_flux.py", "fastvideo/train_grpo_flux_madeup.py"))
    monkeypatch.setenv("OTCA_PATCHES_DIR", str(patches))
    with pytest.raises(ValueError) as refused:
        runtime_for("dancegrpo-sd", OtcaConfig(**PROBE, otca_log_dir=str(tmp_path)))
    assert "(dancegrpo-flux, dancegrpo-flux-kontext, dancegrpo-flux-madeup, dancegrpo-wan, flowgrpo-sd3)" in str(refused.value)


def test_a_spec_that_lists_the_probe_lists_its_three_flags():
    for spec in load_specs():
        if PROBE_FLAG in spec.flags:
            assert {"otca_probe_samples", "otca_probe_window"} <= set(spec.flags), spec.name


def test_probe_steps_are_one_then_every_nth(tmp_path):
    schedule = probe(tmp_path, otca_probe_every=3)
    probed = []
    for step in range(1, 9):
        schedule.start_step(step)
        probed.append(schedule.probing)
    assert probed == [True, False, False, True, False, False, True, False]
    off = TimingProbe(OtcaConfig(otca=True, otca_log_dir=str(tmp_path)))
    assert not off.probing and off.record_fields() == {}


def test_the_map_is_pooled_over_the_last_window_probes_and_used_only_after_them(tmp_path):
    generator = torch.Generator().manual_seed(3)
    probe_ = probe(tmp_path, otca_probe_every=1, otca_probe_samples=4, otca_probe_window=2)
    groups = torch.tensor([0, 0, 1, 1, 2, 2])  # 6 rollouts, the first 4 probed: groups 0 and 1
    batches = []
    for step in (1, 2, 3):
        probe_.start_step(step)
        predictions = torch.randn(6, 5, 2, generator=generator)  # [B, T=5, 2 registry objectives]
        final = torch.cat([torch.randn(6, 1, generator=generator), predictions[:, -1] + 0.1 * predictions[:, 2]], 1)
        roll_out(probe_, predictions)
        used = probe_.map_for_credit()
        if step == 1:
            assert used is None and probe_.record_fields()["objective_timing"] is None
        else:  # the probes before this step, at most 2
            window = batches[-2:]
            step_scores = torch.cat([b[0] for b in window])
            finals = torch.cat([b[1] for b in window])
            labels = torch.cat([b[2] + 10 * n for n, b in enumerate(window)])  # groups of different batches differ
            expected = decided(step_scores, finals, labels)
            assert used.shape == (3, 5)
            assert torch.isnan(used[0]).all()  # upstream's reward: no scorer given
            torch.testing.assert_close(used[1:], expected[1:], atol=1e-12, rtol=0)
            fields = probe_.record_fields()
            assert fields["objective_timing_dof"] == 2 * len(window)  # 4 samples in 2 groups per probe
            assert fields["objective_timing"][0] == [None] * 5 and fields["probe"] is True
        probe_.measure(final, groups, per_rank=6)
        scores = torch.cat([torch.zeros(4, 1, 5), predictions[:4].transpose(1, 2)], 1).double()
        batches.append((scores, final[:4].double(), groups[:4]))
        assert probe_.record_fields()["probe_seconds"] > 0


def test_upstreams_own_reward_fills_its_row_where_the_target_can_call_it(tmp_path):
    probe_ = probe(tmp_path, otca_probe_every=1, otca_probe_samples=4)
    predictions = torch.randn(4, 3, 2, generator=torch.Generator().manual_seed(0))
    roll_out(probe_, predictions, upstream=lambda samples, rows: torch.stack([s.sum() for s in samples]))
    final = torch.cat([predictions[:, -1].sum(1, keepdim=True), predictions[:, -1]], 1)
    probe_.measure(final, torch.tensor([0, 0, 1, 1]), per_rank=4)
    probe_.start_step(2)
    used = probe_.map_for_credit()
    assert torch.isfinite(used).all()
    torch.testing.assert_close(used[:, -1], torch.ones(3, dtype=torch.float64), atol=1e-12, rtol=0)


def test_probed_samples_without_two_of_one_group_are_refused(tmp_path):
    probe_ = probe(tmp_path, otca_probe_every=1, otca_probe_samples=2)
    roll_out(probe_, torch.randn(4, 3, 2))
    with pytest.raises(ValueError, match=r"^--otca_probe_samples 2: the probed samples hold no two of one prompt group"):
        probe_.measure(torch.randn(4, 3), torch.tensor([0, 1, 2, 3]), per_rank=4)


def test_a_sampler_that_handed_too_few_predictions_is_an_error(tmp_path):
    probe_ = probe(tmp_path, otca_probe_every=1, otca_probe_samples=4)
    roll_out(probe_, torch.randn(2, 3, 2))
    with pytest.raises(RuntimeError, match="2 probed samples scored on this rank, expected 4"):
        probe_.measure(torch.randn(6, 3), torch.zeros(6, dtype=torch.long), per_rank=6)


def test_heatmap_rows_are_objectives_and_columns_steps():
    image = heatmap(torch.tensor([[0.0, 1.0], [math.nan, 0.5]]), cell=4)
    assert image.shape == (8, 8, 3) and image.dtype == torch.uint8
    assert image[0, 0].tolist() == [0, 0, 64] and image[0, 4, 1].item() == 255
    assert image[4, 0].tolist() == [128, 128, 128]


def test_a_new_map_goes_to_wandb_as_a_heatmap_on_rank_0(tmp_path, monkeypatch):
    logged = []

    class Image:
        def __init__(self, array, caption):
            self.array, self.caption = array, caption

    fake = type("wandb", (), {"run": object(), "Image": Image, "log": staticmethod(lambda d, **k: logged.append(d))})
    monkeypatch.setitem(__import__("sys").modules, "wandb", fake)
    runtime = runtime_for("dancegrpo-flux", OtcaConfig(**PROBE, otca_log_dir=str(tmp_path)))
    runtime._to_wandb(0, {}, step=1)
    assert "otca/objective_timing" not in logged[-1]  # no map measured this step
    runtime.timing_probe.new_map = torch.tensor([[0.0, 0.5, 1.0]], dtype=torch.float64)  # objective upstream
    runtime._to_wandb(0, {}, step=2)
    image = logged[-1]["otca/objective_timing"]
    assert image.array.shape == (16, 3 * 16, 3)
    assert "rows upstream;" in image.caption and "steps 1..3" in image.caption
    runtime._to_wandb(1, {}, step=2)
    assert len(logged) == 2  # other ranks log nothing


def test_the_probe_decodes_and_scores_under_upstreams_own_autocast(tmp_path, monkeypatch):
    """DanceGRPO decodes its final latents under ``torch.autocast("cuda", bfloat16)`` with a bf16 VAE, and
    scores HPSv2 under ``torch.amp.autocast("cuda")``; the probe does both under the same contexts. Where a
    stand-in maps CUDA autocast to the CPU's (the launch rehearsal's), a bf16 VAE then takes the float32
    predictions as upstream's decode takes its own latents (outside autocast it raises a dtype error)."""
    from otca_patch.rehearsal.standins import _cpu_autocast

    monkeypatch.setattr(torch, "autocast", torch.autocast)  # restored after the test
    monkeypatch.setattr(torch.amp, "autocast", torch.amp.autocast)
    _cpu_autocast(torch)
    vae = torch.nn.Conv2d(3, 3, 1).to(torch.bfloat16)
    runtime = runtime_for("dancegrpo-flux", OtcaConfig(**PROBE, otca_rewards=("upstream",), otca_probe_every=1,
                                                       otca_probe_samples=2, otca_log_dir=str(tmp_path)))
    runtime.reset()
    seen_dtypes = []

    def reward(image, caption):
        seen_dtypes.append(torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else None)
        return image.float().mean()

    for _ in range(2):  # two chunks of one sample, three steps each
        for index in range(3):
            runtime.collect_step_prediction(torch.randn(1, 3, 4, 4), index)
        runtime.score_step_predictions(lambda x: list(vae(x).float()), ["a prompt"], reward)
    assert seen_dtypes == [torch.bfloat16] * 6  # every step's decoded prediction, scored under autocast
    with pytest.raises(RuntimeError, match="should be the same"):  # what the probe met without the context
        vae(torch.randn(1, 3, 4, 4))
