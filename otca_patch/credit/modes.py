"""The credit modes: each mode is one pure function, registered with the facts the package reads.

The engine computes what every mode reads (``Shared``: the objective advantages, TCD's step weights,
...) and hands it to the function of ``CreditConfig.mode``; what only some modes use (MOCA's
exploration bias and fusion) is computed when a mode's body first reads it. The function returns
``Assigned``: the combined advantage ``[B]``, the per-step advantages ``[B, T]`` and the
step weights reported with them ``[B, T]``. The decorator declares what nothing else may restate:

- ``needs``: the inputs beyond rewards and progress (names of ``INPUTS``): the engine requires them
  for this mode and refuses them for every mode that does not declare them;
- ``step_weighted``: ``Shared.per_step`` is TCD's weights (else ones), so ``Shared.spread`` applies them;
- ``fuses``: the combined advantage is MOCA's fused one (the objectives mixed, not summed);
- ``splits``: the mode returns ``Assigned.parts``, how to compute each objective's share of its combined
  advantage (computed only where the option ``objective_timing`` spreads each share over its own steps,
  docs/credit.md 9.3);
- ``whole_batch_std``: the mode divides by a std over the whole batch (group sizes are checked for it);
- ``vanilla``: the credit a vanilla upstream trainer computes itself (one summed reward, normalised per
  group): where a target's vanilla path differs from the engine by rounding, it follows upstream's;
- ``launchable``: a value of ``--otca_mode``; ``False`` for a library-only comparison method whose
  inputs no trainer hook captures (docs/credit.md section 8);
- ``title``: the mode in one phrase (the demo's tables).

Adding a mode: write its function below, decorated with ``@register_mode``; that is the whole
registration. ``CreditConfig`` accepts it, ``--otca_mode`` offers it when launchable, the engine feeds
it, and the demo's variants and ``otca-patch credit`` list it. A mode that needs a new input adds an
``Input`` to ``INPUTS`` and its check to ``inputs.py`` (a ``compute_credit`` keyword of the same name).
A test with expected values computed independently of the function belongs in ``tests/``
(``test_credit_peers.py`` shows the pattern).

This module imports no torch (flag parsing reads the mode names in every launched process): the
functions import their tensor helpers when called.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable, Optional


@dataclass(frozen=True)
class Input:
    """An input beyond rewards and progress that some modes need: a ``compute_credit`` keyword."""

    name: str
    #: what the input is, in errors ("only mode coca uses predicted clean samples")
    what: str
    #: whether ``credit_from_progress`` takes it too (``False``: it is computed from the latents)
    from_progress: bool = True


#: Every input a mode can declare in ``needs``; each one's check is in ``inputs.py``.
INPUTS = {item.name: item for item in (
    Input("clean", "predicted clean samples", from_progress=False),
    Input("step_noise", "the sampler's step noise"),
)}


@dataclass(frozen=True)
class Shared:
    """What a mode reads (float64, on the latents' device).

    Computed by the engine for every mode: ``rewards [B, K]``, those ``sum`` adds up (rescaled under
    ``reward_scale="window"``); ``objective_weights [K]``; ``objective_advantages [B, K]``;
    ``trajectory_score [B]``, TCD's ``q``; ``step_weights [B, T]``, TCD's; ``per_step [B, T]``, TCD's
    weights for a step-weighted mode and ones otherwise; ``index [B]`` dense group ids of ``n_groups``
    groups; ``inputs``: the mode's declared inputs, checked (``inputs.py`` says what each becomes).

    Computed when first read (MOCA, spec 3): ``lambdas [B]``, the exploration bias; ``fused [B]``,
    MOCA's combined advantage; ``mixture [B, K]`` (``sum_k mixture * objective_advantages = fused``).
    """

    config: Any  # CreditConfig
    rewards: Any
    objective_weights: Any
    objective_advantages: Any
    trajectory_score: Any
    step_weights: Any
    per_step: Any
    index: Any
    n_groups: int
    inputs: dict

    @cached_property
    def lambdas(self):
        from .moca import exploration_bias

        config = self.config
        return exploration_bias(self.trajectory_score, self.objective_advantages, self.index, self.n_groups,
                                config.std_correction, config.eps, config.explore, center=config.explore_center,
                                scale=config.explore_scale)

    @property
    def fused(self):
        return self._fusion[0]

    @property
    def mixture(self):
        return self._fusion[1]

    @cached_property
    def _fusion(self) -> tuple:
        """(``fused [B]``, ``mixture [B, K]``): per sample, or one mixture per group (spec 3.7)."""
        from .moca import group_fusion, min_norm_fusion

        if self.config.fusion == "group":
            return group_fusion(self.objective_advantages, self.lambdas, self.index, self.n_groups)
        return min_norm_fusion(self.objective_advantages, self.lambdas)

    def spread(self, combined, parts: Optional[Callable[[], Any]] = None) -> "Assigned":
        """``combined [B]`` over the steps by ``per_step``; TCD's weights reported as the step weights.
        ``parts``: a function returning each objective's share of ``combined`` ``[B, K]`` (for a mode that
        ``splits``; called only when the shares are used)."""
        return Assigned(combined, self.per_step * combined.unsqueeze(-1), self.step_weights, parts)


@dataclass(frozen=True)
class Assigned:
    """A mode's result: ``combined [B]``, ``advantages [B, T]``, ``step_weights [B, T]``, and for a mode
    that ``splits``, ``parts``: a function returning ``[B, K]`` whose row sums are ``combined``."""

    combined: Any
    advantages: Any
    step_weights: Any
    parts: Any = None


@dataclass(frozen=True)
class Mode:
    """One registered mode: its function and its facts (see the module docstring)."""

    name: str
    assign: Callable[[Shared], Assigned]
    needs: tuple = ()
    step_weighted: bool = False
    fuses: bool = False
    splits: bool = False
    whole_batch_std: bool = False
    launchable: bool = True
    title: str = ""
    vanilla: bool = False


_REGISTRY: dict = {}


def register_mode(name: str, *, needs=(), step_weighted: bool = False, fuses: bool = False, splits: bool = False,
                  whole_batch_std: bool = False, launchable: bool = True, title: str = "",
                  vanilla: bool = False) -> Callable:
    """Decorator: register ``function(Shared) -> Assigned`` as credit mode ``name`` with its facts."""
    unknown = [item for item in needs if item not in INPUTS]
    if unknown:
        raise ValueError(f"credit mode {name}: needs unknown input(s) {', '.join(unknown)} "
                         f"(inputs: {', '.join(INPUTS)})")

    def register(function: Callable) -> Callable:
        if name in _REGISTRY:
            raise ValueError(f"credit mode {name}: registered twice")
        _REGISTRY[name] = Mode(name, function, tuple(needs), step_weighted, fuses, splits, whole_batch_std,
                               launchable, title, vanilla)
        return function
    return register


def get(name: str) -> Mode:
    """The mode registered as ``name``; ``KeyError`` if none (``CreditConfig`` names the valid ones)."""
    return _REGISTRY[name]


def names(launchable: Optional[bool] = None) -> tuple:
    """Registered mode names in registration order; only those with ``launchable`` as given, if given."""
    return tuple(m.name for m in _REGISTRY.values() if launchable is None or m.launchable == launchable)


def users(input_name: str) -> tuple:
    """The modes that declare ``input_name`` in ``needs``."""
    return tuple(m.name for m in _REGISTRY.values() if input_name in m.needs)


# ----------------------------------------------------------------------------- the modes (docs/credit.md 5, 8)
# Registration order is the order ``--otca_mode`` lists them in.

@register_mode("otca", step_weighted=True, fuses=True, splits=True, title="OTCA (TCD + MOCA)")
def otca(x: Shared) -> Assigned:
    """MOCA's fused advantage, spread over the steps by TCD's weights (the default)."""
    return x.spread(x.fused, lambda: x.mixture * x.objective_advantages)


@register_mode("moca", fuses=True, splits=True, title="+ MOCA only")
def moca(x: Shared) -> Assigned:
    """MOCA's fused advantage, the same at every step."""
    return x.spread(x.fused, lambda: x.mixture * x.objective_advantages)


@register_mode("tcd", step_weighted=True, splits=True, title="+ TCD only")
def tcd(x: Shared) -> Assigned:
    """The sum of the objective advantages, spread over the steps by TCD's weights."""
    return x.spread(x.objective_advantages.sum(dim=-1), lambda: x.objective_advantages)


@register_mode("multi_grpo", splits=True, title="Multi-GRPO (per-reward normalisation)")
def multi_grpo(x: Shared) -> Assigned:
    """The sum of the per-objective group advantages (per-reward normalisation), at every step."""
    return x.spread(x.objective_advantages.sum(dim=-1), lambda: x.objective_advantages)


@register_mode("gdpo", whole_batch_std=True, splits=True, title="GDPO (batch-normalised sum)")
def gdpo(x: Shared) -> Assigned:
    """The sum of the objective advantages, normalised again over the whole batch (GDPO)."""
    from .groups import group_normalize, group_normalize_parts

    config, whole_batch = x.config, x.index.new_zeros(x.index.shape)
    summed = x.objective_advantages.sum(dim=-1)
    combined = group_normalize(summed, whole_batch, 1, config.std_correction, config.adv_eps)
    return x.spread(combined, lambda: group_normalize_parts(x.objective_advantages, whole_batch, 1,
                                                            config.std_correction, config.adv_eps))


@register_mode("sum", splits=True, vanilla=True, title="Vanilla DanceGRPO (summed reward)")
def sum_of_rewards(x: Shared) -> Assigned:
    """One scalar reward, ``rewards @ objective_weights``, normalised per group (vanilla DanceGRPO)."""
    from .groups import group_normalize, group_normalize_parts

    config = x.config
    combined = group_normalize(x.rewards @ x.objective_weights, x.index, x.n_groups, config.std_correction,
                               config.adv_eps, config.std_scope)
    return x.spread(combined, lambda: group_normalize_parts(x.rewards * x.objective_weights, x.index, x.n_groups,
                                                            config.std_correction, config.adv_eps, config.std_scope))


@register_mode("coca", needs=("clean",), launchable=False, title="CoCA (x0-hat contribution credit; comparison)")
def coca(x: Shared) -> Assigned:
    """CoCA (spec 8.1): the summed advantage shaped by each step's contribution to the predicted clean
    sample, then re-standardised per group; the shaping is reported as the step weights."""
    from .peers import coca_advantages, coca_step_contributions

    config, similarity = x.config, x.inputs["clean"]
    n_steps = similarity.shape[1] - 1
    if n_steps % config.coca_window:
        raise ValueError(f"coca_window: {config.coca_window} does not divide the {n_steps} steps")
    contributions = coca_step_contributions(similarity, config.coca_window, config.eps)
    combined = x.objective_advantages.sum(dim=-1)
    advantages, shaping = coca_advantages(combined, contributions.to(combined.device), config.coca_alpha, x.index,
                                          x.n_groups)
    return Assigned(combined, advantages, shaping)


@register_mode("tempflow", needs=("step_noise",), launchable=False,
               title="TempFlow-GRPO (noise-aware step weights; comparison)")
def tempflow(x: Shared) -> Assigned:
    """TempFlow-GRPO (spec 8.2): the summed advantage spread over the steps by the noise schedule's weights."""
    from .peers import tempflow_weights

    combined = x.objective_advantages.sum(dim=-1)
    weights = tempflow_weights(x.inputs["step_noise"], combined.shape[0]).to(combined.device)
    return Assigned(combined, weights * combined.unsqueeze(-1), weights)
