"""The registry of credit modes (``otca_patch.credit.modes``): a mode is one registered function whose
declared inputs the engine requires and refuses, and whose facts the rest of the package reads."""
import ast
from pathlib import Path

import pytest
import torch

from otca_patch.credit import MODES, PEER_MODES, CreditConfig, compute_credit, credit_from_progress, modes
from otca_patch.credit.modes import Assigned, register_mode

CREDIT = Path(__file__).resolve().parents[2] / "otca_patch" / "credit"


@pytest.fixture
def halved_mode():
    """A library-only mode registered for one test: half of Multi-GRPO's advantage at every step."""
    @register_mode("test_halved", needs=("step_noise",), launchable=False, title="half of Multi-GRPO")
    def halved(x):
        combined = 0.5 * x.objective_advantages.sum(dim=-1)
        return Assigned(combined, x.per_step * combined.unsqueeze(-1), x.step_weights)
    yield "test_halved"
    del modes._REGISTRY["test_halved"]


def _batch():
    generator = torch.Generator().manual_seed(3)
    return (torch.randn(6, 2, generator=generator), torch.randn(6, 5, 4, generator=generator),
            torch.tensor([0, 0, 0, 1, 1, 1]))


def test_the_modes_and_their_facts_are_those_of_the_spec():
    """docs/credit.md sections 5 and 8: which modes spread by TCD's weights, which fuse by MOCA."""
    assert MODES == ("otca", "moca", "tcd", "multi_grpo", "gdpo", "sum") and PEER_MODES == ("coca", "tempflow")
    assert {m for m in modes.names() if modes.get(m).step_weighted} == {"otca", "tcd"}
    assert {m for m in modes.names() if modes.get(m).fuses} == {"otca", "moca"}
    assert {m for m in modes.names() if modes.get(m).whole_batch_std} == {"gdpo"}
    assert {m for m in modes.names() if modes.get(m).vanilla} == {"sum"}  # vanilla DanceGRPO's one summed reward
    assert modes.get("coca").needs == ("clean",) and modes.get("tempflow").needs == ("step_noise",)
    assert all(not modes.get(m).needs for m in MODES)  # a trainer's hooks feed rewards and progress only


def test_a_registered_mode_runs_with_its_declared_input_and_no_other(halved_mode):
    rewards, latents, groups = _batch()
    noise = torch.full((4,), 0.2)
    halved = compute_credit(rewards, latents, groups, CreditConfig(mode=halved_mode), step_noise=noise)
    multi = compute_credit(rewards, latents, groups, CreditConfig(mode="multi_grpo"))
    assert torch.allclose(halved.advantages, 0.5 * multi.advantages, atol=1e-6)
    assert halved.mode == halved_mode
    with pytest.raises(ValueError, match="^step_noise: mode test_halved needs a float tensor"):
        compute_credit(rewards, latents, groups, CreditConfig(mode=halved_mode))
    with pytest.raises(ValueError, match=r"^step_noise: only mode tempflow, test_halved uses the sampler's step noise"):
        compute_credit(rewards, latents, groups, CreditConfig(mode="otca"), step_noise=noise)
    again = credit_from_progress(rewards, halved.delta_s, groups, CreditConfig(mode=halved_mode), step_noise=noise)
    assert torch.allclose(again.advantages, halved.advantages, atol=1e-6)


def test_a_mode_is_registered_once_and_needs_known_inputs():
    with pytest.raises(ValueError, match="credit mode otca: registered twice"):
        register_mode("otca")(lambda x: x)
    with pytest.raises(ValueError, match="needs unknown input"):
        register_mode("test_unknown", needs=("timing",))


def test_credit_from_progress_refuses_a_mode_whose_input_comes_from_latents():
    rewards, _, groups = _batch()
    with pytest.raises(ValueError, match=r"^mode: coca needs predicted clean samples; use compute_credit\(\.\.\., clean=\.\.\.\)"):
        credit_from_progress(rewards, torch.rand(6, 4), groups, CreditConfig(mode="coca"))


def test_every_declared_input_has_a_check():
    from otca_patch.credit import inputs

    assert set(modes.INPUTS) == inputs.checked_inputs()


@pytest.mark.parametrize("module", ["engine.py", "batch.py"])
def test_the_engine_compares_no_mode_name(module):
    """The engine and its input checks read facts from the registry; a string constant naming a mode
    appears in none of their comparisons (``config.mode == "coca"``, ``mode in ("moca", "otca")``)."""
    tree = ast.parse((CREDIT / module).read_text())
    named = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Compare)
             for const in ast.walk(node) if isinstance(const, ast.Constant) and const.value in modes.names()]
    assert named == []


#: a value of every input a mode can declare, for the ``_batch()`` shapes (B = 6, T = 4, states of 4 values)
INPUT_VALUES = {"clean": lambda: torch.randn(6, 5, 4, generator=torch.Generator().manual_seed(5)),
                "step_noise": lambda: torch.full((4,), 0.2)}


@pytest.fixture
def moca_calls(monkeypatch):
    """The names of MOCA's functions as they are called (the real ones run)."""
    from otca_patch.credit import moca

    calls = []
    for name in ("exploration_bias", "min_norm_fusion", "group_fusion"):
        real = getattr(moca, name)
        monkeypatch.setattr(moca, name, lambda *a, _real=real, _name=name, **k: (calls.append(_name), _real(*a, **k))[1])
    return calls


@pytest.mark.parametrize("name", modes.names())
@pytest.mark.parametrize("fusion", ["sample", "group"])
def test_a_mode_computes_mocas_fusion_only_when_its_body_uses_it(name, fusion, moca_calls):
    """The registry's ``fuses`` fact is what the body does: a mode that does not fuse leaves MOCA to the
    first read of ``Credit.lambdas`` / ``mixture``, which then gives the fusing modes' values."""
    rewards, latents, groups = _batch()
    extra = {needed: INPUT_VALUES[needed]() for needed in modes.get(name).needs}
    credit = compute_credit(rewards, latents, groups, CreditConfig(mode=name, fusion=fusion), **extra)
    fused = ["exploration_bias", "group_fusion" if fusion == "group" else "min_norm_fusion"]
    assert moca_calls == (fused if modes.get(name).fuses else [])
    reference = compute_credit(rewards, latents, groups, CreditConfig(mode="otca", fusion=fusion))
    torch.testing.assert_close(credit.mixture, reference.mixture, atol=1e-6, rtol=0)
    torch.testing.assert_close(credit.lambdas, reference.lambdas, atol=1e-6, rtol=0)
    assert moca_calls == fused + fused  # once for this credit (in the mode, or at the first read), once for the reference
    assert set(credit.tensors()) >= {"lambdas", "mixture"}
