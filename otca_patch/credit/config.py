"""The one configuration object of the credit engine (docs/credit.md, sections 1-5)."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Optional

from ..flags import flag
from . import modes

#: The modes ``--otca_mode`` offers (``modes.py``: the paper's Table 4 ablations plus the peers' baselines).
MODES = modes.names(launchable=True)
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
#: values, because no trainer's hooks capture their inputs yet.
PEER_MODES = modes.names(launchable=False)
#: The largest objective weight: the weights scale the advantages, which trainers keep in float32
#: (max 3.4e38). A normalised advantage stays below sqrt(B) per objective, so even T = 1e3 steps,
#: K = 1e2 objectives and B = 1e6 samples leave weights up to 1e20 far from overflow.
MAX_OBJECTIVE_WEIGHT = 1e20


@dataclass(frozen=True)
class CreditConfig:
    """Every option of the OTCA credit rules; defaults are the spec's and must not change.

    Frozen: it is validated once, when built, so it cannot be changed into an invalid state later
    (``dataclasses.replace`` builds a new, validated one).

    Each field's help (``flag(help, default, ...)``) documents it, and is the help of its
    ``--otca_<field>`` flag: ``OtcaConfig`` takes these fields from here (``flags.include``), all but
    those marked ``library_only`` (their inputs come from no trainer's hooks).
    """

    mode: str = flag(f"credit mode: {', '.join(MODES)}", "otca", choices=MODES)
    w_min: float = flag("smallest TCD step weight, in [0, 1]; 1 gives uniform weights", 0.5)
    eps: float = flag("TCD / exploration smoothing: of the step shares and of the exploration strength's std", 1e-6)
    adv_eps: float = flag("added to the group std when normalising rewards (DanceGRPO's 1e-8)", 1e-8)
    std_correction: int = flag("Bessel correction of every std (1 = unbiased, as torch.std)", 1)
    explore: float = flag("MOCA exploration bias beta (>= 0); 0 is the pure minimum-norm fusion", 1.0)
    objective_weights: Optional[tuple[float, ...]] = flag(
        "s_k per objective column, comma-separated, in the order of the expanded names (upstream.vq, "
        f"videoalign.mq, ...; each in [0, {MAX_OBJECTIVE_WEIGHT:g}], not all 0; default: all 1)", None)
    std_scope: str = flag("std that normalises rewards: 'group' (the paper's) or 'batch' (one std over the whole "
                          "batch, with the group's mean: FlowGRPO's global_std)", "group", choices=STD_SCOPES)
    weight_scope: str = flag("TCD step weights from each sample's step shares ('sample', the paper's) or the batch's "
                             "mean shares ('batch': the timestep schedule alone, a control)", "sample",
                             choices=WEIGHT_SCOPES)
    explore_center: bool = flag("MOCA exploration strength from |q - mean_g(q)| instead of |q| (docs/credit.md 3.6)", False)
    fusion: str = flag("MOCA fusion: per sample ('sample', the paper's) or one exact minimum-norm mixture per "
                       "prompt group ('group', docs/credit.md 3.7)", "sample", choices=FUSIONS)
    explore_scale: str = flag("MOCA exploration bias: beta*tanh(e) ('absolute', the paper's) or that times the sample's "
                              "largest objective advantage ('max_advantage', docs/credit.md 3.8)", "absolute",
                              choices=EXPLORE_SCALES)
    reward_scale: str = flag("each objective divided by its group's std ('group', the paper's) or each raw reward by "
                             "its std over a running window of recent rewards, compute_credit's reward_window, then "
                             "only the group's mean subtracted ('window', docs/credit.md 2.1)", "group",
                             choices=REWARD_SCALES, library_only=True)
    objective_timing: str = flag("spread each objective's share of the combined advantage over the steps by when "
                                 "that objective is decided ('probe': by the map compute_credit's timing_map, "
                                 "docs/credit.md 9.3; the mode's own rule until a map is measured) or not ('off', "
                                 "the paper's); a trainer target takes it once it has the probe", "off",
                                 choices=OBJECTIVE_TIMINGS)
    timing_floor: float = flag("smallest per-objective step weight under objective_timing=probe, in [0, 1] "
                               "(1: uniform)", 0.5)
    coca_alpha: float = flag("CoCA's temporal_alpha, in [0, 1], for the comparison mode coca (docs/credit.md 8.1)", 0.0,
                             library_only=True)
    coca_window: int = flag("CoCA's window of steps (it must divide T) for the comparison mode coca (docs/credit.md 8.1)", 1,
                            library_only=True)

    def __post_init__(self) -> None:
        """Validates every field, one group at a time; a bad value raises one ValueError naming its field."""
        self._check_mode()
        self._check_numbers()
        self._check_choices()
        self._check_objective_timing()
        self._check_objective_weights()

    def _check_mode(self) -> None:
        """The credit mode, and the parameters of the comparison mode coca."""
        if self.mode not in modes.names():
            raise ValueError(f"mode: unknown credit mode {self.mode!r}; valid modes are "
                             f"{', '.join(modes.names(launchable=True))} (and the comparison methods "
                             f"{', '.join(modes.names(launchable=False))})")
        _check_finite("coca_alpha", self.coca_alpha)
        if not 0.0 <= self.coca_alpha <= 1.0:
            raise ValueError(f"coca_alpha: must lie in [0, 1], got {self.coca_alpha}")
        if isinstance(self.coca_window, bool) or not isinstance(self.coca_window, int) or self.coca_window < 1:
            raise ValueError(f"coca_window: must be an integer >= 1, got {self.coca_window!r}")

    def _check_numbers(self) -> None:
        """The numeric knobs of TCD, reward normalisation and exploration; ``std_correction`` becomes an int."""
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

    def _check_choices(self) -> None:
        """The scopes, fusion and scales chosen by name, and the one combination of them that is refused."""
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

    def _check_objective_timing(self) -> None:
        """How each objective's share is spread over the steps, and its floor."""
        if self.objective_timing not in OBJECTIVE_TIMINGS:
            raise ValueError(f"objective_timing: must be one of {', '.join(OBJECTIVE_TIMINGS)}, got {self.objective_timing!r}")
        if self.uses_timing_map and not modes.get(self.mode).splits:
            raise ValueError(f"objective_timing: probe spreads each objective's share of the combined advantage over "
                             f"the steps; mode {self.mode} does not split its advantage into objectives' shares")
        _check_finite("timing_floor", self.timing_floor)
        if not 0.0 <= self.timing_floor <= 1.0:
            raise ValueError(f"timing_floor: must lie in [0, 1], got {self.timing_floor}")

    def _check_objective_weights(self) -> None:
        """The per-objective weights ``s_k``; stored back as a tuple of floats."""
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
    def uses_timing_map(self) -> bool:
        """Whether each objective's share of the combined advantage is spread over the steps by a
        measured timing map (``objective_timing="probe"``, docs/credit.md 9.3): the one place that
        reads the option's value."""
        return self.objective_timing == "probe"

    @property
    def step_weighted(self) -> bool:
        """Whether the mode spreads the combined advantage over steps by TCD's weights."""
        return modes.get(self.mode).step_weighted

    def to_dict(self) -> dict:
        """Plain-JSON form (for run logs); ``CreditConfig(**d)`` rebuilds it."""
        data = asdict(self)
        if data["objective_weights"] is not None:
            data["objective_weights"] = list(data["objective_weights"])
        return data


def _check_finite(name: str, value: float) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise ValueError(f"{name}: must be a finite number, got {value!r}")
