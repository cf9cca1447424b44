"""The rewrite engine on synthetic upstream sources: anchors found, missing, found twice; code
spliced where the spec says; tracebacks pointing into the upstream file."""
import ast
import traceback
from pathlib import Path

import pytest

from otca_patch.hooks import PatchError, check, compile_target, load_spec, rewrite
from otca_patch.hooks.pattern import matches, parse_anchor
from otca_patch.hooks.spec import Hook, TargetSpec

UPSTREAM = '''\
import math

def train(rewards):
    advantages = [r - 1 for r in rewards]
    total = 0.0
    for key in ["a", "b"]:
        total += 1
    for step in range(2):
        total += advantages[step]
    return total

def helper():
    raise RuntimeError("upstream failure")
'''


def spec_with(*hooks: Hook) -> TargetSpec:
    return TargetSpec(name="synthetic", upstream="Synthetic", file="pkg/train.py", runtime="unused",
                      verified_commit="abc1234", verified_sha256="0" * 64, hooks=hooks, path="patches/synthetic.toml")


def run(source: str, spec: TargetSpec, runtime=None, filename="/up/pkg/train.py") -> dict:
    namespace = {"__otca__": runtime}
    exec(compile_target(source, spec, filename), namespace)
    return namespace


class Runtime:
    def __init__(self):
        self.calls = []

    def scale(self, values):
        self.calls.append(list(values))
        return [2 * v for v in values]


def test_replace_statement_changes_behaviour_and_calls_runtime():
    hook = Hook(name="scale", function="train", anchor="advantages = ...", action="replace",
                code="advantages = __otca__.scale([r - 1 for r in rewards])")
    runtime = Runtime()
    namespace = run(UPSTREAM, spec_with(hook), runtime)
    assert namespace["train"]([3, 5]) == 2 + 2 * 2 + 2 * 4
    assert runtime.calls == [[2, 4]]


def test_insert_after_and_before_keep_order():
    log = []
    after = Hook(name="after", function="train", anchor="total = 0.0", action="insert_after", code="__otca__.append('after')")
    before = Hook(name="before", function="train", anchor="return total", action="insert_before", code="__otca__.append('before')")
    namespace = run(UPSTREAM, spec_with(after, before), log)
    namespace["train"]([1, 1])
    assert log == ["after", "before"]


def test_expression_replace_with_match_placeholder_and_within():
    hook = Hook(name="keys", function="train", anchor="['a', 'b']", action="replace", code="__match__ + ['c']")
    read = Hook(name="read", function="train", anchor="advantages[step]", within="for step in range(2): ...",
                action="replace", code="10 * __match__")
    namespace = run(UPSTREAM, spec_with(hook, read), None)
    # three keys now, and the loop over steps reads ten times the advantage
    assert namespace["train"]([2, 3]) == 3 + 10 * (1 + 2)


def test_module_scope_def_anchor():
    hook = Hook(name="wrap", function="<module>", anchor="def train", action="insert_after",
                code="train = __otca__(train)")
    namespace = run(UPSTREAM, spec_with(hook), lambda fn: (lambda rewards: ("wrapped", fn(rewards))))
    assert namespace["train"]([1, 1]) == ("wrapped", 2.0)


@pytest.mark.parametrize("anchor,count,expected", [
    ("advantages = {}", 1, "anchor not found, expected exactly 1"),
    ("total += ...", 1, "anchor found 2 times, expected exactly 1"),
    ("total += ...", 3, "anchor found 2 times, expected exactly 3"),
])
def test_wrong_match_count_raises_patch_error_naming_everything(anchor, count, expected):
    hook = Hook(name="h", function="train", anchor=anchor, count=count, action="insert_after", code="pass")
    with pytest.raises(PatchError) as raised:
        rewrite(UPSTREAM, spec_with(hook), "/up/pkg/train.py")
    message = str(raised.value)
    for part in ("pkg/train.py", "function train", anchor, "abc1234", expected, "'h'"):
        assert part in message
    assert raised.value.function == "train" and raised.value.anchor == anchor


def test_missing_function_is_reported():
    hook = Hook(name="h", function="train_v2", anchor="pass", action="insert_after", code="pass")
    with pytest.raises(PatchError, match="function 'train_v2' is not defined"):
        rewrite(UPSTREAM, spec_with(hook), "x.py")


def test_insertions_anchor_on_statements_only():
    # `advantages[step]` occurs only inside `total += ...`: there is no statement to insert after
    hook = Hook(name="h", function="train", anchor="advantages[step]", action="insert_after", code="pass")
    statuses = check(UPSTREAM, spec_with(hook))
    assert not statuses[0].ok and "anchor not found" in statuses[0].problem


def test_check_reports_every_hook_without_raising():
    good = Hook(name="good", function="train", anchor="total = 0.0", action="insert_after", code="pass")
    bad = Hook(name="bad", function="train", anchor="total = 1.0", action="insert_after", code="pass")
    statuses = check(UPSTREAM, spec_with(good, bad))
    assert [(s.hook.name, s.ok, s.found) for s in statuses] == [("good", True, 1), ("bad", False, 0)]


def test_formatting_and_comments_do_not_matter():
    reformatted = UPSTREAM.replace("advantages = [r - 1 for r in rewards]",
                                   "advantages = [  # comment\n        r - 1 for r in rewards\n    ]")
    hook = Hook(name="h", function="train", anchor="advantages = [r - 1 for r in rewards]", action="insert_after",
                code="pass")
    assert check(reformatted, spec_with(hook))[0].ok


def test_tracebacks_point_into_the_upstream_file():
    hook = Hook(name="h", function="train", anchor="total = 0.0", action="insert_after", code="helper()")
    namespace = run(UPSTREAM, spec_with(hook), None, filename="/up/pkg/train.py")
    with pytest.raises(RuntimeError) as raised:
        namespace["train"]([1])
    frames = traceback.extract_tb(raised.value.__traceback__)
    upstream_frames = [(f.filename, f.lineno) for f in frames if f.filename == "/up/pkg/train.py"]
    # the inserted call reports the anchor's line (5), the raise its own upstream line (13)
    assert upstream_frames == [("/up/pkg/train.py", 5), ("/up/pkg/train.py", 13)]


def test_wildcards():
    assert matches(parse_anchor("f(...)"), ast.parse("f(1, x=2)").body[0].value)
    assert not matches(parse_anchor("f(...)"), ast.parse("g(1)").body[0].value)
    assert matches(parse_anchor("for k in [...]: ..."), ast.parse("for k in [1, 2]:\n    x = 1\n    y = 2").body[0])
    assert not matches(parse_anchor("for k in [1]: ..."), ast.parse("for k in [1, 2]:\n    pass").body[0])


def test_spec_loading_validates(tmp_path: Path):
    good = tmp_path / "good.toml"
    good.write_text('[target]\nname="t"\nupstream="U"\nfile="a/b.py"\nruntime="m:R"\nverified_commit="c"\n'
                    'verified_sha256="s"\n[[hooks]]\nname="h"\nfunction="f"\nanchor="x = 1"\naction="replace"\ncode="x = 2"\nreads=[]\n')
    spec = load_spec(good)
    assert spec.hooks[0].count == 1 and spec.matches_script("/somewhere/a/b.py") and not spec.matches_script("/b.py")
    bad = tmp_path / "bad.toml"
    bad.write_text(good.read_text().replace('action="replace"', 'action="delete"'))
    with pytest.raises(ValueError, match=r"bad.toml: \[\[hooks\]\] h: action 'delete'"):
        load_spec(bad)
    missing = tmp_path / "missing.toml"
    missing.write_text(good.read_text().replace('verified_commit="c"\n', ""))
    with pytest.raises(ValueError, match="lacks verified_commit"):
        load_spec(missing)
    zero = tmp_path / "zero.toml"
    zero.write_text(good.read_text() + "count = 0\n")
    with pytest.raises(ValueError, match="count must be a positive integer"):
        load_spec(zero)


def test_shipped_specs_load_and_name_existing_runtimes():
    from otca_patch.hooks import load_specs
    from otca_patch.targets.base import Runtime
    from otca_patch.targets.registry import runtime_class

    specs = load_specs()
    assert specs, "patches/ holds no spec"
    for spec in specs:
        assert issubclass(runtime_class(spec), Runtime), spec.runtime
        assert len(spec.verified_commit) == 40 and len(spec.verified_sha256) == 64


# ---- what the inserted code relies on: names it reads, pins


def test_a_hook_whose_read_name_is_renamed_upstream_is_refused():
    hook = Hook("scale", "train", "return total", "replace", "return __otca__.scale(advantages)",
                reads=("advantages",))
    assert run(UPSTREAM, spec_with(hook), Runtime())["train"]([1.0, 2.0]) == [0.0, 2.0]
    renamed = UPSTREAM.replace("advantages", "adv")
    with pytest.raises(PatchError, match=r"reads 'advantages', which upstream no longer binds in function 'train'"):
        compile_target(renamed, spec_with(hook), "/up/pkg/train.py")
    status = check(renamed, spec_with(hook))[0]
    assert not status.ok and "'advantages'" in status.problem


def test_a_read_name_bound_only_at_module_level_does_not_count():
    """A renamed local must not resolve to a global of the same name."""
    hook = Hook("h", "train", "return total", "replace", "return math", reads=("math",))
    with pytest.raises(PatchError, match="no longer binds"):
        compile_target(UPSTREAM, spec_with(hook), "/up/pkg/train.py")


def test_pins_must_hold_on_the_upstream_file():
    hook = Hook("scale", "train", "return total", "replace", "return 0", reads=())
    pin = Hook("step_index", "train", "advantages[step]", "pin", "", within="for step in range(...): ...")
    spec = TargetSpec(**{**spec_with(hook).__dict__, "pins": (pin,)})
    assert run(UPSTREAM, spec)["train"]([1.0, 2.0]) == 0
    reordered = UPSTREAM.replace("advantages[step]", "advantages[1 - step]")
    with pytest.raises(PatchError, match=r"pin 'step_index' .* function train, does not hold: anchor not found"):
        compile_target(reordered, spec, "/up/pkg/train.py")
    assert [s.ok for s in check(reordered, spec)] == [False, True]


def test_spec_reads_must_match_the_code(tmp_path: Path):
    base = ('[target]\nname="t"\nupstream="U"\nfile="a/b.py"\nruntime="m:R"\nverified_commit="c"\nverified_sha256="s"\n'
            '[[hooks]]\nname="h"\nfunction="f"\nanchor="x = 1"\naction="replace"\ncode="x = g(y, len(z)) + __otca__.k"\n')
    path = tmp_path / "s.toml"
    path.write_text(base + 'reads=["y", "z", "g"]\n')
    assert set(load_spec(path).hooks[0].reads) == {"g", "y", "z"}
    path.write_text(base + 'reads=["y"]\n')
    with pytest.raises(ValueError, match=r"code reads \['g', 'y', 'z'\], reads lists \['y'\]"):
        load_spec(path)
    path.write_text(base)
    with pytest.raises(ValueError, match="`reads` must list"):
        load_spec(path)
    path.write_text(base + 'reads=["y", "z", "g"]\n[[pins]]\nname="p"\nfunction="f"\nanchor="y[:, i]"\ncode="x"\n')
    with pytest.raises(ValueError, match=r"\[\[pins\]\] p: unknown keys \['code'\]"):
        load_spec(path)


def test_a_lambdas_own_parameters_are_not_upstream_names(tmp_path: Path):
    from otca_patch.hooks.spec import names_read

    assert names_read("__otca__.score(lambda x: vae.decode(x * scale), caption)") == {"vae", "scale", "caption"}
    assert names_read("f(lambda image, text: model(image, text))") == {"f", "model"}
    assert names_read("g(lambda rows: [prompts[r] for r in rows])") == {"g", "prompts"}


def test_the_shipped_specs_state_reads_and_pin_the_trained_column():
    from otca_patch.hooks import load_specs

    for spec in load_specs():
        assert spec.pins, f"{spec.path}: no pins"
        assert any("log_probs" in pin.anchor for pin in spec.pins), spec.path


def test_the_trained_step_invariant():
    import torch

    from otca_patch.targets.invariants import TrainedStepCheck

    check_ = TrainedStepCheck()
    latents = torch.randn(2, 3, 4)  # [B, S-1, ...]
    samples = {"latents": latents, "otca_advantages": torch.arange(6.0).reshape(2, 3)}
    keys = check_.permuted_keys(samples, ["latents", "otca_advantages"])
    sample = {k: samples[k][:1] for k in keys}
    trained = []
    one_step = check_.watch(lambda args, latents: trained.append(latents))
    one_step(None, sample["latents"][:, 2])
    assert check_.read(sample, 2, "otca_advantages").tolist() == [2.0]
    one_step(None, sample["latents"][:, 0])
    with pytest.raises(PatchError, match="advantage of column 1"):
        check_.read(sample, 1, "otca_advantages")
    check_.end_step()
    assert check_.read(sample, 1, "otca_advantages").tolist() == [1.0]  # later steps are not checked
