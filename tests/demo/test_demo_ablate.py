"""``otca-patch ablate``: the Table-4 layout with controls, the credit options it needs, and a tiny
end-to-end run."""
import json
import re

import pytest
import torch
from demo_fixtures import one_thread, tiny_flags  # noqa: F401 (autouse)

from otca_patch.demo import ablate
from otca_patch.demo.variants import ABLATION_ORDER, VARIANTS, check_available

def _stat(mean):
    return {"mean": mean, "low": mean - 0.1, "high": mean + 0.1, "n": 3, "values": []}


def _fake_result(modes):
    objectives = ["a", "b"]
    columns = objectives + ["mean_gap_closed", "drift"]
    table = {m: {c: _stat(0.1 * i) for c in columns} for i, m in enumerate(modes)}
    return {"objectives": objectives, "modes": list(reversed(modes)), "table": table, "reference_mode": "multi_grpo",
            "comparisons": {m: {c: _stat(0.05) for c in columns} for m in modes if m != "multi_grpo"},
            "verdicts": {m: "Not separated" for m in modes if m != "multi_grpo"},
            "base": {"a": 0.4, "b": 0.2}, "oracle": {"a": 1.0, "b": 1.0}, "seconds": {"total": 1.0},
            "config": {"grpo_steps": 1, "prompts_per_step": 1, "group_size": 2, "sampling_steps": 3,
                       "learning_rate": 1e-4, "clip_range": 1e-4}, "seeds": [0, 1, 2]}


def test_table_has_the_paper_layout_in_the_paper_order_then_the_controls():
    table = ablate.render_table(_fake_result(ABLATION_ORDER)).splitlines()
    assert table[0].startswith("| Method | variant | TCD | MOCA | a | b | mean gap closed | drift |")
    rows = table[2:]
    assert [r.split("`")[1] for r in rows] == list(ABLATION_ORDER)
    switches = {r.split("`")[1]: [s.strip() for s in r.split("|")[3:5]] for r in rows}
    assert switches["sum"] == ["✗", "✗"] and switches["tcd"] == ["✓", "✗"]
    assert switches["moca"] == ["✗", "✓"] and switches["otca"] == ["✓", "✓"]
    assert switches["tcd_batch"] == ["✓ (batch)", "✗"] and switches["moca_group"] == ["✗", "✓"]
    assert "+0.100 [+0.000, +0.200]" in rows[1]
    text = ablate.render_markdown(_fake_result(ABLATION_ORDER), "cmd")
    assert "| `otca` | +0.050 [-0.050, +0.150]" in text and "Not separated" in text


def test_every_row_is_a_credit_mode_with_options_of_the_engine():
    assert set(ABLATION_ORDER) == set(VARIANTS)
    assert VARIANTS["tcd_batch"].options == {"weight_scope": "batch"}
    assert VARIANTS["moca_beta0"].credit_config().explore == 0.0
    assert VARIANTS["multi_grpo_moca_rms"].rescale_to == "moca"


def test_a_control_the_engine_cannot_run_is_named_before_any_work(tmp_path, capsys, monkeypatch):
    from otca_patch.demo import variants

    monkeypatch.setitem(variants.VARIANTS, "tcd_batch", variants.Variant("tcd_batch", "tcd", {"weight_scopes": "batch"}))
    with pytest.raises(ValueError, match="weight_scopes"):
        check_available(["otca", "tcd_batch"])
    assert ablate.main(["--out", str(tmp_path), "--modes", "multi_grpo,tcd_batch"]) == 2
    assert "weight_scopes" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_the_controls_run_on_this_credit_engine():
    check_available(ABLATION_ORDER)
    assert VARIANTS["moca_group"].credit_config().fusion == "group"
    assert VARIANTS["moca_centred"].credit_config().explore_center is True


@pytest.mark.slow
def test_tiny_ablation_writes_the_table(tmp_path, capsys):
    flags = ["--out", str(tmp_path), "--base_cache", str(tmp_path), "--modes", "multi_grpo,otca,tcd_batch,moca_group",
             "--seeds", "0,1"] + tiny_flags()
    assert ablate.main(flags) == 0
    result = json.loads((tmp_path / "ablation.json").read_text())
    assert result["seeds"] == [0, 1] and set(result["table"]) == {"multi_grpo", "otca", "tcd_batch", "moca_group"}
    assert len(result["table"]["otca"]["palette"]["values"]) == 2
    assert set(result["comparisons"]) == {"otca", "tcd_batch", "moca_group"}
    text = (tmp_path / "ablation.md").read_text()
    assert "OTCA (TCD + MOCA)" in text and "fusion=group" in text
    assert re.findall(r"``|otca_patch|\w+\.py\b|docs/|credit\.md|section \d|\bspec \d", text) == []  # no internal notes
    assert "| Method |" in capsys.readouterr().out


def test_unknown_mode_is_rejected(tmp_path, capsys):
    assert ablate.main(["--out", str(tmp_path), "--modes", "sum,fancy"]) == 2
    assert "unknown credit mode 'fancy'" in capsys.readouterr().err
