"""The one configuration object of the credit engine (docs/credit.md, sections 1-5)."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Optional, Sequence

#: Credit modes: the paper's Table 4 ablations plus the peers' baselines (spec section 5).
MODES = ("otca", "moca", "tcd", "multi_grpo", "gdpo", "sum")
#: Where the std that normalises rewards is taken: each group's (the spec) or the whole batch's.
STD_SCOPES = ("group", "batch")
#: Whose step shares set TCD's step weights: each sample's own (the spec) or the batch's mean (spec 1.6).
WEIGHT_SCOPES = ("sample", "batch")
#: How MOCA fuses objectives: per sample (the spec, 3.4-3.5) or one MGDA mixture per group (3.7).
FUSIONS = ("sample", "group")
#: How MOCA's exploration bias is scaled (docs/credit.md 3.8): the paper's absolute beta*tanh(e) (the
#: spec), or that times the sample's largest objective advantage (tied to the advantages' scale).
EXPLORE_SCALES = ("absolute", "max_advantage")
#: How each raw reward is scaled before its group baseline (docs/credit.md 2.1): by each group's std
#: (the spec), or to unit std over a running window of recent rewards (App. A.5's rescaling).
REWARD_SCALES = ("group", "window")
#: Whether each objective's advantage is spread over the steps by when it is decided (docs/credit.md
#: 9.3): ``off`` (the spec) or ``probe`` (weights from the map a probe measured).
OBJECTIVE_TIMINGS = ("off", "probe")
#: Comparison methods (docs/credit.md section 8; not OTCA): library options only, not ``--otca_mode``
#: values, because their inputs (predicted clean samples, the sampler's noise per step) are not
#: captured by any trainer's hooks yet.
PEER_MODES = ("coca", "tempflow")
#: The largest objective weight: the weights scale the advantages, which trainers keep in float32
#: (max 3.4e38). A normalised advantage stays below sqrt(B) per objective, so even T = 1e3 steps,
#: K = 1e2 objectives and B = 1e6 samples leave weights up to 1e20 far from overflow.
MAX_OBJECTIVE_WEIGHT = 1e20
#: Modes that multiply the combined advantage by TCD's step weights.
STEP_WEIGHTED_MODES = frozenset({"otca", "tcd"})


@dataclass(frozen=True)
class CreditConfig:
    """Every option of the OTCA credit rules; defaults are the spec's and must not change.

    Frozen: it is validated once, when built, so it cannot be changed into an invalid state later
    (``dataclasses.replace`` builds a new, validated one).

    Attributes:
        mode: one of ``MODES``; ``otca`` (TCD x MOCA) by default.
        w_min: the smallest step weight, in [0, 1]; 1 gives uniform weights.
        eps: smoothing of step shares and of the exploration strength's std.
        adv_eps: added to the group std when normalising rewards (DanceGRPO's 1e-8).
        std_correction: Bessel correction of every std (1 = unbiased, as ``torch.std``).
        explore: MOCA's exploration bias beta (>= 0); 0 is the pure minimum-norm fusion.
        objective_weights: s_k per objective (length K, each in [0, ``MAX_OBJECTIVE_WEIGHT``], not all 0);
            ``None`` means all ones.
        std_scope: ``group`` (the spec: each group's std) or ``batch`` (one std over the whole
            batch, with the group's mean: FlowGRPO's ``global_std=True``). An option, not a default.
        weight_scope: ``sample`` (the spec) or ``batch``: every sample's step weights come from the
            batch's mean step share (spec 1.6; TCD reduced to a timestep schedule, a control).
        explore_center: ``False`` (the spec) or ``True``: the exploration strength measures ``q``'s
            deviation from its group mean (spec 3.6).
        fusion: ``sample`` (the spec) or ``group``: one minimum-norm mixture per group over the
            group's advantage vectors, solved exactly (spec 3.7, the MGDA reading).
        explore_scale: ``absolute`` (the spec: ``lambda = beta tanh(e)``) or ``max_advantage``:
            ``lambda = beta tanh(e) max_k A[i, k]`` (spec 3.8, an option testing the bias's gap-fill).
        reward_scale: ``group`` (the spec: each objective divided by its group's std) or ``window``:
            each raw reward divided by its std over a running window of recent rewards (the
            ``reward_window`` argument of ``compute_credit``), then only the group's mean subtracted
            (spec 2.1, App. A.5's "rescale individual reward components").
        objective_timing: ``off`` (the spec) or ``probe``: each objective's share of the combined
            advantage is spread over the steps by the map ``decided [K, T]`` passed to
            ``compute_credit`` (docs/credit.md 9.3); without a map (not yet measured) the mode's own rule.
        timing_floor: the smallest per-objective step weight under ``probe``, in [0, 1] (1: uniform).
        coca_alpha, coca_window: CoCA's ``temporal_alpha`` (0) and window of steps (1; it must
            divide T) for the comparison mode ``coca`` (spec 8.1).
    """

    mode: str = "otca"
    w_min: float = 0.5
    eps: float = 1e-6
    adv_eps: float = 1e-8
    std_correction: int = 1
    explore: float = 1.0
    objective_weights: Optional[Sequence[float]] = field(default=None)
    std_scope: str = "group"
    weight_scope: str = "sample"
    explore_center: bool = False
    fusion: str = "sample"
    explore_scale: str = "absolute"
    reward_scale: str = "group"
    objective_timing: str = "off"
    timing_floor: float = 0.5
    coca_alpha: float = 0.0
    coca_window: int = 1

    def __post_init__(self) -> None:
        if self.mode not in MODES + PEER_MODES:
            raise ValueError(f"mode: unknown credit mode {self.mode!r}; valid modes are {', '.join(MODES)} "
                             f"(and the comparison methods {', '.join(PEER_MODES)})")
        _check_finite("coca_alpha", self.coca_alpha)
        if not 0.0 <= self.coca_alpha <= 1.0:
            raise ValueError(f"coca_alpha: must lie in [0, 1], got {self.coca_alpha}")
        if isinstance(self.coca_window, bool) or not isinstance(self.coca_window, int) or self.coca_window < 1:
            raise ValueError(f"coca_window: must be an integer >= 1, got {self.coca_window!r}")
        _check_finite("w_min", self.w_min)
        if not 0.0 <= self.w_min <= 1.0:
            raise ValueError(f"w_min: must lie in [0, 1], got {self.w_min}")
        _check_finite("eps", self.eps)
        if self.eps <= 0:
            raise ValueError(f"eps: must be > 0 (it keeps step shares defined), got {self.eps}")
        _check_finite("adv_eps", self.adv_eps)
        if self.adv_eps < 0:
            raise ValueError(f"adv_eps: must be >= 0, got {self.adv_eps}")
        if isinstance(self.std_correction, bool) or int(self.std_correction) != self.std_correction or self.std_correction < 0:
            raise ValueError(f"std_correction: must be a non-negative integer, got {self.std_correction!r}")
        object.__setattr__(self, "std_correction", int(self.std_correction))
        _check_finite("explore", self.explore)
        if self.explore < 0:
            raise ValueError(f"explore: must be >= 0, got {self.explore}")
        if self.std_scope not in STD_SCOPES:
            raise ValueError(f"std_scope: must be one of {', '.join(STD_SCOPES)}, got {self.std_scope!r}")
        if self.weight_scope not in WEIGHT_SCOPES:
            raise ValueError(f"weight_scope: must be one of {', '.join(WEIGHT_SCOPES)}, got {self.weight_scope!r}")
        if not isinstance(self.explore_center, bool):
            raise ValueError(f"explore_center: must be true or false, got {self.explore_center!r}")
        if self.fusion not in FUSIONS:
            raise ValueError(f"fusion: must be one of {', '.join(FUSIONS)}, got {self.fusion!r}")
        if self.explore_scale not in EXPLORE_SCALES:
            raise ValueError(f"explore_scale: must be one of {', '.join(EXPLORE_SCALES)}, got {self.explore_scale!r}")
        if self.reward_scale not in REWARD_SCALES:
            raise ValueError(f"reward_scale: must be one of {', '.join(REWARD_SCALES)}, got {self.reward_scale!r}")
        if self.reward_scale == "window" and self.std_scope != "group":
            raise ValueError("reward_scale: window sets every objective's scale itself; it cannot be combined with "
                             f"std_scope={self.std_scope!r}")
        if self.objective_timing not in OBJECTIVE_TIMINGS:
            raise ValueError(f"objective_timing: must be one of {', '.join(OBJECTIVE_TIMINGS)}, got {self.objective_timing!r}")
        if self.objective_timing == "probe" and self.mode in PEER_MODES:
            raise ValueError(f"objective_timing: probe spreads objectives over steps; mode {self.mode} has its own step "
                             "credit (use a mode of otca_patch.credit.MODES)")
        _check_finite("timing_floor", self.timing_floor)
        if not 0.0 <= self.timing_floor <= 1.0:
            raise ValueError(f"timing_floor: must lie in [0, 1], got {self.timing_floor}")
        if self.objective_weights is not None:
            weights = tuple(float(w) for w in self.objective_weights)
            if not weights:
                raise ValueError("objective_weights: must name at least one weight (or be None for all ones)")
            bad = [i for i, w in enumerate(weights) if not math.isfinite(w) or not 0 <= w <= MAX_OBJECTIVE_WEIGHT]
            if bad:
                raise ValueError(
                    f"objective_weights: must be finite, >= 0 and at most {MAX_OBJECTIVE_WEIGHT:g} (they scale the "
                    f"float32 advantages); index {bad[0]} is {weights[bad[0]]:g}"
                )
            if not any(weights):
                raise ValueError(f"objective_weights: all {len(weights)} are 0, so every advantage would be 0 and "
                                 f"nothing would train; give at least one weight > 0")
            object.__setattr__(self, "objective_weights", weights)

    @property
    def step_weighted(self) -> bool:
        """Whether the mode spreads the combined advantage over steps by TCD's weights."""
        return self.mode in STEP_WEIGHTED_MODES

    def to_dict(self) -> dict:
        """Plain-JSON form (for run logs); ``CreditConfig(**d)`` rebuilds it."""
        data = asdict(self)
        if data["objective_weights"] is not None:
            data["objective_weights"] = list(data["objective_weights"])
        return data


def _check_finite(name: str, value: float) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise ValueError(f"{name}: must be a finite number, got {value!r}")
