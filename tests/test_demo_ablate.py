"""``otca-patch ablate``: the Table-4 layout, seeds, and a tiny end-to-end run."""
import json
import math

import pytest
import torch

from otca_patch.demo import ablate
from otca_patch.demo.config import TINY_SIZES


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _fake_result():
    objectives = ["a", "b"]
    table = {m: {"a": {"mean": 0.5, "std": 0.1, "values": []}, "b": {"mean": 0.25, "std": math.nan, "values": []},
                 "balanced": {"mean": 0.1 * i, "std": 0.01, "values": []}} for i, m in enumerate(ablate.ABLATION_ORDER)}
    return {"objectives": objectives, "modes": list(reversed(ablate.ABLATION_ORDER)), "table": table,
            "base": {"rewards": {"a": 0.4, "b": 0.2}}, "config": {"grpo_steps": 1, "prompts_per_step": 1,
                                                                 "group_size": 2, "sampling_steps": 3}, "seeds": [0]}


def test_table_has_the_paper_layout_in_the_paper_order():
    table = ablate.render_table(_fake_result()).splitlines()
    assert table[0].startswith("| Method | mode | TCD | MOCA | a | b | balanced |")
    rows = table[3:]
    assert [r.split("`")[1] for r in rows] == list(ablate.ABLATION_ORDER)
    switches = {r.split("`")[1]: r.split("|")[3:5] for r in rows}
    assert [s.strip() for s in switches["sum"]] == ["✗", "✗"]
    assert [s.strip() for s in switches["tcd"]] == ["✓", "✗"]
    assert [s.strip() for s in switches["moca"]] == ["✗", "✓"]
    assert [s.strip() for s in switches["otca"]] == ["✓", "✓"]
    assert "0.5000 ± 0.1000" in table[3] and "| 0.2500 |" in table[3]  # one seed: no std
    assert "Ranking by mean balanced score: `otca`" in ablate.render_markdown(_fake_result(), "cmd")


@pytest.mark.parametrize("text, message", [("", "at least one"), ("1,x", "integers"), ("2,2", "twice")])
def test_bad_seeds_are_named(text, message):
    with pytest.raises(ValueError, match=message):
        ablate.parse_seeds(text)


@pytest.mark.slow
def test_tiny_ablation_writes_the_table(tmp_path, capsys):
    flags = ["--out", str(tmp_path), "--base-cache", str(tmp_path), "--modes", "sum,moca,otca", "--seeds", "0,1"]
    for name, value in TINY_SIZES.items():
        if name in ("modes",):
            continue
        flag = "--" + name.replace("_", "-")
        flags += [flag] if value is True else ([f"--no-{flag[2:]}"] if value is False else [flag, str(value)])
    assert ablate.main(flags) == 0
    result = json.loads((tmp_path / "ablation.json").read_text())
    assert result["seeds"] == [0, 1] and set(result["table"]) == {"sum", "moca", "otca"}
    assert len(result["table"]["otca"]["balanced"]["values"]) == 2
    text = (tmp_path / "ablation.md").read_text()
    assert "OTCA (TCD + MOCA)" in text and "±" in text
    assert "| Method |" in capsys.readouterr().out


def test_unknown_mode_is_rejected(tmp_path, capsys):
    assert ablate.main(["--out", str(tmp_path), "--modes", "sum,fancy"]) == 2
    assert "unknown credit mode 'fancy'" in capsys.readouterr().err
