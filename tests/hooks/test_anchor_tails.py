"""Anchors tolerate no-op tails: a value upstream follows with ``.detach()``, ``.clone()``
or ``.contiguous()`` still matches, the layer's code lands exactly where it would without them, and
any other change to the value is still refused."""
import ast
import hashlib

import pytest
import torch

from otca_patch.hooks import PatchError, check, compile_target
from otca_patch.hooks import doctor
from otca_patch.hooks.spec import PIN, Hook, TargetSpec

UPSTREAM = '''\
import torch

def train(rewards, latents):
    advantages = (rewards - rewards.mean()) / rewards.std()
    samples = dict()
    samples["advantages"] = advantages{assign_tail}
    stacked = torch.stack(latents, dim=1).detach(){stack_tail}
    total = 0.0
    for j in range(stacked.shape[1]):
        total = total + (samples["advantages"]{read_tail} * stacked{column_tail}[:, j].sum()).sum()
    return samples, total
'''
PLAIN = dict(assign_tail="", stack_tail="", read_tail="", column_tail="")

ASSIGN = Hook(name="per_step_advantages", function="train", anchor='samples["advantages"] = advantages',
              action="replace", code='samples["advantages"] = __otca__.assign(advantages)',
              reads=("samples", "advantages"))
AFTER = Hook(name="after_assign", function="train", anchor='samples["advantages"] = advantages',
             action="insert_after", code="__otca__.seen(samples)", reads=("samples",))
READ = Hook(name="read_advantage", function="train", anchor='samples["advantages"]', within="for j in range(...): ...",
            action="replace", code="__otca__.read(samples, j)", reads=("samples", "j"))
STACK_PIN = Hook(name="final_latent_last", function="train", anchor="stacked = torch.stack(latents, dim=1).detach()",
                 action=PIN, code="")
COLUMN_PIN = Hook(name="trained_column", function="train", anchor="stacked[:, j]", within="for j in range(...): ...",
                  action=PIN, code="")


def spec(*hooks, pins=(STACK_PIN, COLUMN_PIN)):
    return TargetSpec(name="synthetic", upstream="Synthetic", file="pkg/train.py", runtime="unused",
                      verified_commit="abc1234", verified_sha256="0" * 64, hooks=hooks, pins=pins,
                      path="patches/synthetic.toml")


def source(**tails):
    return UPSTREAM.format(**{**PLAIN, **tails})


class Layer:
    """What the inserted code calls: records the objects it was given and returns its own values."""

    def __init__(self):
        self.given, self.reads = [], []

    def assign(self, advantages):
        self.given.append(advantages)
        return advantages  # like observe mode: upstream's own tensor goes back

    def seen(self, samples):
        self.given.append(samples["advantages"])

    def read(self, samples, j):
        self.reads.append(j)
        return 10 * samples["advantages"]


def run(text, hooks):
    layer, namespace = Layer(), {}
    namespace["__otca__"] = layer
    exec(compile_target(text, spec(*hooks), "/up/pkg/train.py"), namespace)
    rewards, latents = torch.tensor([1.0, 2.0, 4.0]), [torch.ones(3, 2) * k for k in range(3)]
    samples, total = namespace["train"](rewards, latents)
    return layer, samples, total


@pytest.mark.parametrize("tails", [
    dict(assign_tail=".clone()", stack_tail=".clone()"),  # the two examples
    dict(assign_tail=".detach()", stack_tail=".contiguous()", column_tail=".detach()"),
    dict(assign_tail=".clone().detach().contiguous()", stack_tail=".detach()", column_tail=".clone()"),
])
def test_no_op_tails_on_anchored_values_hold_and_are_reported(tails):
    statuses = check(source(**tails), spec(ASSIGN, READ))
    assert all(status.ok for status in statuses), [(s.hook.name, s.problem) for s in statuses]
    reported = {status.hook.name: status.tails for status in statuses if status.tails}
    expected = {"per_step_advantages": ("advantages" + tails["assign_tail"],)}
    if tails.get("stack_tail"):
        expected["final_latent_last"] = ("torch.stack(latents, dim=1).detach()" + tails["stack_tail"],)
    if tails.get("column_tail"):
        expected["trained_column"] = ("stacked" + tails["column_tail"],)
    assert reported == expected
    assert all(not status.tails for status in check(source(), spec(ASSIGN, READ)))


@pytest.mark.parametrize("tails,problem_of", [
    (dict(assign_tail=".mean()"), "per_step_advantages"),
    (dict(assign_tail=" * 2"), "per_step_advantages"),
    (dict(assign_tail=".float()"), "per_step_advantages"),  # changes the dtype: not a no-op
    (dict(assign_tail=".clone(memory_format=torch.contiguous_format)"), "per_step_advantages"),  # arguments: refused
    (dict(stack_tail=".mean(0)"), "final_latent_last"),
    (dict(column_tail=".flip(1)"), "trained_column"),
])
def test_any_other_change_to_an_anchored_value_is_still_refused(tails, problem_of):
    failing = [s.hook.name for s in check(source(**tails), spec(ASSIGN, READ)) if not s.ok]
    assert failing == [problem_of]
    with pytest.raises(PatchError, match="anchor not found"):
        compile_target(source(**tails), spec(ASSIGN, READ), "/up/pkg/train.py")


def test_a_removed_detach_is_not_a_tail():
    """The pin spells `.detach()`: a file without it changes gradients and is refused."""
    text = source().replace("torch.stack(latents, dim=1).detach()", "torch.stack(latents, dim=1)")
    assert [s.hook.name for s in check(text, spec(ASSIGN)) if not s.ok] == ["final_latent_last"]


def test_a_replaced_statement_carries_upstreams_tail_into_the_layers_code():
    """`samples["advantages"] = advantages.clone()` replaced: the layer gets the copy upstream stored,
    so samples never aliases the upstream local (as in upstream), and the layer's value is what is stored."""
    layer, samples, _ = run(source(assign_tail=".clone()"), [ASSIGN])
    assert len(layer.given) == 1
    assert samples["advantages"] is layer.given[0]  # the replacement is applied, not thrown away
    plain_layer, plain_samples, _ = run(source(), [ASSIGN])
    assert torch.equal(samples["advantages"], plain_samples["advantages"])
    rewritten = ast.unparse(ast.parse(compile_source(source(assign_tail=".clone()"), [ASSIGN])))
    assert "__otca__.assign(advantages.clone())" in rewritten
    assert "__otca__.assign(advantages)" in compile_source(source(), [ASSIGN])


def test_an_insertion_lands_at_the_same_place_and_reads_the_same_names():
    layer, samples, _ = run(source(assign_tail=".clone()"), [AFTER])
    assert layer.given == [samples["advantages"]] and samples["advantages"] is layer.given[0]


def test_an_expression_replacement_lands_inside_upstreams_tail():
    """`samples["advantages"].clone()` in the loop: the layer's read replaces the inner value (found
    once, not twice), and upstream's `.clone()` applies to the layer's value."""
    text = source(read_tail=".clone()")
    statuses = check(text, spec(READ))
    assert [(s.hook.name, s.found, s.ok) for s in statuses if s.hook is READ] == [("read_advantage", 1, True)]
    assert "__otca__.read(samples, j).clone()" in compile_source(text, [READ])
    layer, _, total = run(text, [READ])
    _, _, plain_total = run(source(), [READ])
    assert layer.reads == [0, 1, 2] and torch.equal(total, plain_total)


def test_a_tail_repeated_over_an_anchor_that_ends_in_one_counts_once():
    """`x.detach()` anchored, `x.detach().detach()` found: one match, the inner call (the outer one
    stays upstream's tail)."""
    text = "def f(x):\n    y = g(x.detach().detach())\n    return y\n"
    hook = Hook(name="h", function="f", anchor="x.detach()", action="replace", code="__otca__(__match__)")
    [status] = check(text, spec(hook, pins=()))
    assert status.ok and status.found == 1
    assert "g(__otca__(x.detach()).detach())" in compile_source(text, [hook], pins=())


def compile_source(text, hooks, pins=(STACK_PIN, COLUMN_PIN)):
    from otca_patch.hooks import rewrite

    return ast.unparse(rewrite(text, spec(*hooks, pins=pins), "/up/pkg/train.py"))


def test_doctor_says_which_hook_points_needed_a_tail(tmp_path, capsys):
    checkout, patches = tmp_path / "up", tmp_path / "patches"
    (checkout / "pkg").mkdir(parents=True)
    patches.mkdir()
    text = source(assign_tail=".clone()", stack_tail=".clone()")
    (checkout / "pkg" / "train.py").write_text(text)
    (patches / "synthetic.toml").write_text(f'''
[target]
name = "synthetic"
upstream = "Synthetic"
file = "pkg/train.py"
runtime = "unused:Unused"
verified_commit = "abc1234"
verified_sha256 = "{hashlib.sha256(source().encode()).hexdigest()}"

[[pins]]
name = "final_latent_last"
function = "train"
anchor = "stacked = torch.stack(latents, dim=1).detach()"

[[hooks]]
name = "per_step_advantages"
function = "train"
anchor = 'samples["advantages"] = advantages'
action = "replace"
code = 'samples["advantages"] = __otca__.assign(advantages)'
reads = ["samples", "advantages"]
''')
    assert doctor.main([str(checkout), "--patches", str(patches)]) == 0
    identity = [line for line in capsys.readouterr().out.splitlines() if "pkg/train.py: sha256" in line]
    assert len(identity) == 1
    assert "its structure still matches" in identity[0]
    assert ("2 hold only past no-op .detach() / .clone() / .contiguous() calls upstream added: final_latent_last "
            "(torch.stack(latents, dim=1).detach().clone()), per_step_advantages (advantages.clone())") in identity[0]
    (checkout / "pkg" / "train.py").write_text(source())  # the verified file: nothing to say about tails
    assert doctor.main([str(checkout), "--patches", str(patches)]) == 0
    out = capsys.readouterr().out
    assert "identical to the file the spec was verified on" in out and "no-op" not in out
