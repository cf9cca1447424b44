"""An upstream file is parsed once per process: choosing its spec (several upstreams share a path),
rewriting it and the line on its identity share one parse. Counted by wrapping ``ast.parse``: the
calls whose source is the file's text."""
import ast
import shutil

import pytest

from otca_patch.hooks.prepare import prepare, rewritten
from otca_patch.hooks.select import choose_spec
from otca_patch.hooks.spec import load_specs
from test_spec_choice import DANCE, spec, upstream_file
from upstream_snapshots import upstream_checkout

SHARED = "fastvideo/train_grpo_flux.py"  # DanceGRPO's and MixGRPO's FLUX trainer


@pytest.fixture()
def parses(monkeypatch):
    """``count(text)``: how many times ``ast.parse`` has parsed ``text`` since the test began."""
    seen = []
    parse = ast.parse

    def counting(source, *args, **kwargs):
        seen.append(source)
        return parse(source, *args, **kwargs)

    monkeypatch.setattr(ast, "parse", counting)
    return lambda text: sum(1 for source in seen if source == text)


def test_a_worker_parses_a_shared_unverified_file_once(tmp_path, parses):
    path = upstream_file(tmp_path, DANCE)  # not the verified file of either spec
    specs = [spec("dance", "DanceGRPO", "advantages"), spec("mix", "MixGRPO", "merged")]
    prepared = prepare(path, {}, specs)
    assert prepared.spec.name == "dance" and "do not for mix" in prepared.reason
    assert "differs from the file the spec was verified on" in prepared.identity
    assert parses(DANCE) == 1


def test_the_launch_s_preflight_parses_it_once_and_a_changed_file_again(tmp_path, parses):
    path = upstream_file(tmp_path, DANCE)
    specs = [spec("dance", "DanceGRPO", "advantages"), spec("mix", "MixGRPO", "merged")]
    rewritten(path, choose_spec(path, specs).spec)
    assert parses(DANCE) == 1
    changed = DANCE + "# edited\n"
    path.write_text(changed)  # the parse is kept by content: an edited file is read anew
    assert choose_spec(path, specs).spec.name == "dance" and parses(changed) == 1


def test_the_rewrite_from_the_shared_parse_runs_like_one_from_its_own(tmp_path):
    path = upstream_file(tmp_path, DANCE)
    dance = spec("dance", "DanceGRPO", "advantages")
    first, _ = rewritten(path, dance)
    second, _ = rewritten(path, dance)  # from the kept parse: the first rewrite did not change it
    for code in (first, second):
        namespace = {}
        exec(code, namespace)
        samples = {}
        namespace["train_one_step"](samples, [1.0])
        assert samples == {"advantages": [1.0]}


@pytest.mark.upstream
def test_dancegrpo_s_flux_trainer_changed_is_parsed_once_where_mixgrpo_shares_its_path(tmp_path, parses):
    checkout = upstream_checkout("DanceGRPO", "OTCA_UPSTREAM_DANCEGRPO", SHARED)
    path = tmp_path / SHARED
    path.parent.mkdir(parents=True)
    shutil.copyfile(checkout / SHARED, path)
    with open(path, "a") as handle:
        handle.write("\n# a local edit: not the verified file\n")
    specs = [s for s in load_specs() if s.file == SHARED]
    assert {s.upstream for s in specs} >= {"DanceGRPO", "MixGRPO"}
    prepared = prepare(path, {}, specs)
    assert prepared.spec.upstream == "DanceGRPO" and prepared.identity
    assert parses(path.read_text()) == 1
