"""The objectives of a patched run, in ``--otca_rewards`` order: upstream's own rewards (read from
what the trainer computed, never recomputed) and reward-registry models (loaded once, when the layer
is installed, so a missing checkpoint stops the run before training).

Which names are upstream's is the target's business: each runtime holds an ``UpstreamRewards``
resolver. ``Objectives`` does the rest once for every target: expanding names into columns (a
multi-output registry model, or ``upstream`` standing for several upstream rewards), checking the
checkpoint / option / weight flags against them, and building the ``[B, K]`` reward matrix.
"""
from __future__ import annotations

from typing import Mapping, Optional, Sequence

import torch


#: The objective name for the reward that the upstream trainer computes itself (never recomputed).
UPSTREAM = "upstream"


class UpstreamRewards:
    """What the trainer computes itself, and where each objective reads it.

    ``columns``: keys of a reward dictionary the trainer fills, offered as ``upstream.<key>``
    (empty: the trainer computes one ``[B]`` reward, read by the objective ``upstream``).
    ``plain``: the key that plain ``upstream`` reads; ``None`` with columns: ``upstream`` stands for
    every column. ``aliases``: other names for a key (FlowGRPO's ``avg``); ``bare_keys``: a column's
    key is also an objective name by itself (FlowGRPO's ``config.reward_fn`` keys).
    """

    def __init__(self, columns: Sequence[str] = (), plain: Optional[str] = None, aliases: Optional[dict] = None,
                 bare_keys: bool = False):
        self.columns, self.plain = tuple(columns), plain
        self.aliases, self.bare_keys = dict(aliases or {}), bare_keys

    def resolve(self, name: str) -> Optional[dict]:
        """``{objective name: key}`` that ``name`` stands for (key ``None``: the one ``[B]`` reward),
        or ``None`` when ``name`` is not upstream's (a registry model)."""
        if name == UPSTREAM:
            if not self.columns or self.plain is not None:
                return {name: self.plain}
            return {f"{UPSTREAM}.{c}": c for c in self.columns}
        if name in self.aliases:
            return {name: self.aliases[name]}
        if self.bare_keys and name in self.columns:
            return {name: name}
        if name.startswith(UPSTREAM + ".") and self.columns:
            key = name[len(UPSTREAM) + 1:]
            if key not in self.columns:
                raise ValueError(f"--otca_rewards: {name} is not a reward this trainer computes (it offers "
                                 f"{', '.join(f'{UPSTREAM}.{c}' for c in self.columns)})")
            return {name: key}
        return None

    def read(self, upstream, key: Optional[str], name: str) -> torch.Tensor:
        """Column ``key`` of what the trainer computed (a ``[B]`` tensor or a dictionary of them)."""
        if upstream is None:
            raise ValueError(f"objective {name} requested but the trainer computed no reward")
        if key is None:
            return torch.as_tensor(upstream).detach().float().reshape(-1)
        if key not in upstream:
            raise ValueError(f"objective {name}: the trainer's rewards lack {key!r} (it gave {', '.join(upstream)})")
        return torch.as_tensor(upstream[key]).detach().float().reshape(-1)


class Objectives:
    """Builds the ``[B, K]`` reward matrix of a batch, one column per objective in ``self.names``."""

    def __init__(self, names: Sequence[str], upstream: UpstreamRewards, checkpoints: Mapping, options: Mapping,
                 device, weights: Optional[Sequence[float]] = None, reward_set=None):
        """``reward_set``: the registry models already loaded for the same names (a rebinding keeps them)."""
        self.upstream = upstream
        entries = []  # (objective name, upstream key) for upstream's; (model name, REGISTRY) otherwise
        #: each name given -> the columns it stands for (``upstream`` -> upstream.vq, ...; ``videoalign`` -> ...)
        self.columns_of = {}
        for name in names:
            resolved = upstream.resolve(name)
            entries += list(resolved.items()) if resolved is not None else [(name, _REGISTRY)]
            self.columns_of[name] = list(resolved) if resolved is not None else None  # registry: once loaded
        self.keys = {name: key for name, key in entries if key is not _REGISTRY}
        registry = [name for name, key in entries if key is _REGISTRY]
        unknown = (set(checkpoints) | set(options)) - set(registry)
        if unknown:
            raise ValueError(f"--otca_reward_ckpt/--otca_reward_opt name rewards that are not registry objectives: "
                             f"{', '.join(sorted(unknown))} (objectives: {', '.join(names)})")
        self.reward_set = None
        if registry:
            from .rewards import RewardSet

            if reward_set is None:
                check_checkpoints(registry, checkpoints, options)  # the message names the flag, not checkpoint=
            self.reward_set = reward_set if reward_set is not None else \
                RewardSet(registry, checkpoints=dict(checkpoints), device=device, options=dict(options))
            self.columns_of.update({model: list(m.outputs) for model, m in zip(registry, self.reward_set.models)})
        self.names = tuple(column for name in names for column in self.columns_of[name])
        if len(set(self.names)) != len(self.names):
            raise ValueError(f"--otca_rewards: objectives repeat once expanded: {', '.join(self.names)}")
        check_weight_count(weights, self.columns_of)

    @property
    def needs_images(self) -> bool:
        """Whether a registry model scores the decoded samples (else nothing needs to be kept)."""
        return self.reward_set is not None

    def matrix(self, upstream, samples, prompts: Sequence[str], frames: int = 1) -> torch.Tensor:
        """``[B, K]`` float32: upstream's rewards (a ``[B]`` tensor or a dictionary of them) and the
        registry's scores of ``samples``: images (a list of PIL images or ``[3, H, W]`` tensors, or
        ``[B, 3, H, W]``) or videos (``[B, F, 3, H, W]`` or a list of ``[F, 3, H, W]``), all in [0, 1].
        Video rewards score whole videos; image rewards score ``frames`` evenly spaced frames of each
        video, and a video's score is the mean over its frames."""
        columns = {name: self.upstream.read(upstream, key, name) for name, key in self.keys.items()}
        if self.reward_set is not None:
            columns.update(self._registry_columns(samples, list(prompts), frames))
        device = next(iter(columns.values())).device
        return torch.stack([columns[name].to(device) for name in self.names], dim=1)

    def registry_matrix(self, samples, prompts: Sequence[str], frames: int = 1) -> torch.Tensor:
        """``[n, K]`` float32: the registry's scores of ``samples`` (as ``matrix`` takes them) in their
        columns, NaN in upstream's (what the trainer computed is known for its own samples only)."""
        columns = self._registry_columns(samples, list(prompts), frames) if self.reward_set is not None else {}
        count = len(prompts)
        device = next(iter(columns.values())).device if columns else torch.device("cpu")
        nan = torch.full((count,), float("nan"), device=device)
        return torch.stack([columns.get(name, nan).float().to(device) for name in self.names], dim=1)

    def _registry_columns(self, samples, prompts: list, frames: int) -> dict:
        if isinstance(samples, (list, tuple)) and samples and isinstance(samples[0], torch.Tensor):
            samples = torch.stack([s.detach().float() for s in samples])
        if samples is None or len(samples) != len(prompts):
            raise ValueError(f"objectives: {0 if samples is None else len(samples)} decoded samples but "
                             f"{len(prompts)} prompts")
        if not (isinstance(samples, torch.Tensor) and samples.dim() == 5):
            scores = self.reward_set.score(samples, prompts).scores
            return {name: scores[:, i].float() for i, name in enumerate(self.reward_set.names)}
        batch, length = samples.shape[:2]
        picked = torch.linspace(0, length - 1, min(frames, length)).round().long()
        stills = samples[:, picked].flatten(0, 1)  # [B * n, 3, H, W], sample-major
        still_prompts = [p for p in prompts for _ in range(len(picked))]
        columns = {}
        for model in self.reward_set.models:
            if getattr(model, "modality", "image") == "video":
                scores = model.score_all(samples, prompts)
            else:
                scores = model.score_all(stills, still_prompts).reshape(batch, len(picked), -1).mean(dim=1)
            columns.update({name: scores[:, i].float() for i, name in enumerate(model.outputs)})
        return columns


def check_weight_count(weights: Optional[Sequence[float]], columns_of: Mapping[str, Sequence[str]]) -> None:
    """``--otca_objective_weights`` gives one weight per objective column: ``columns_of`` maps each
    ``--otca_rewards`` name to the columns it stands for. A one-line ``ValueError`` naming the flag."""
    names = [column for columns in columns_of.values() for column in columns]
    if weights is not None and len(weights) != len(names):
        expansions = [f"{name} = {','.join(columns)}" for name, columns in columns_of.items() if len(columns) > 1]
        said = f" ({'; '.join(expansions)})" if expansions else ""
        raise ValueError(f"--otca_objective_weights: {len(weights)} weights for {len(names)} objective columns "
                         f"{','.join(names)}{said}; give one weight per objective column, in this order (for example "
                         f"--otca_objective_weights {','.join(['1'] * len(names))})")


def expected_columns(names: Sequence[str], upstream: UpstreamRewards) -> dict:
    """``{name: its columns}`` as ``Objectives`` will expand ``names`` against ``upstream``, before any
    model loads: a registry model by the outputs its class declares, any other name (a key of the
    trainer's own rewards) as one column. Raises ``ImportError`` when a registry adapter cannot be
    imported here (its outputs are then unknown)."""
    from .rewards.registry import available, output_names

    columns = {}
    for name in names:
        resolved = upstream.resolve(name)
        columns[name] = (list(resolved) if resolved is not None else
                         list(output_names(name)) if name in available() else [name])
    return columns


def check_objective_flags(names: Sequence[str], checkpoints: Mapping, options: Mapping,
                          trainer_names_rewards: bool = False) -> None:
    """Before a launch starts anything: each objective is upstream's (``upstream``, ``upstream.KEY``:
    the trainer checks the key) or a registry model, and the checkpoint and option flags name
    registry objectives with options they have. ``trainer_names_rewards``: the trainer's own reward
    names are objectives too (FlowGRPO's ``config.reward_fn`` keys), checked once it has read them.
    Raises a one-line ``ValueError`` with "did you mean" for a near miss."""
    from .rewards.registry import available, check_options
    from .suggest import did_you_mean

    registry = []
    for name in names:
        if name == UPSTREAM or name.startswith(UPSTREAM + "."):
            continue
        if name in available():
            registry.append(name)
        elif not trainer_names_rewards:
            known = [UPSTREAM, *available()]
            raise ValueError(f"--otca_rewards: {name!r} is neither {UPSTREAM!r} nor a reward model of the registry"
                             f"{did_you_mean(name, known)} (objectives: {', '.join(known)})")
    for flag, given in (("--otca_reward_ckpt", checkpoints), ("--otca_reward_opt", options)):
        for name in given:
            if name not in registry:
                raise ValueError(f"{flag}: {name!r} is not a registry objective of --otca_rewards "
                                 f"{','.join(names)}{did_you_mean(name, registry)}")
    for name in registry:
        try:
            check_options(name, dict(options.get(name, {})))
        except ImportError:
            pass  # the adapter's library is missing here; each trainer process says so with its fix
    check_checkpoints(registry, checkpoints, options)


def check_checkpoints(registry: Sequence[str], checkpoints: Mapping, options: Mapping) -> None:
    """Every checkpoint file of the registry objectives ``registry`` exists (``--otca_reward_ckpt``,
    a path option, else the ``OTCA_CKPT_*`` variable, as the loaders resolve them); one
    ``CheckpointError`` line per reward that lacks one, joined."""
    from .rewards.checkpoints import CheckpointError
    from .rewards.registry import checkpoint_paths

    problems = []
    for name in registry:
        try:
            checkpoint_paths(name, checkpoints.get(name), dict(options.get(name, {})))
        except CheckpointError as exc:
            problems.append(str(exc))
    if problems:
        raise CheckpointError("; ".join(problems))


_REGISTRY = object()  # marks an objective that a registry model scores
