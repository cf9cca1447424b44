"""What every target's runtime shares, DanceGRPO and FlowGRPO alike: the configuration, the
objectives, the one credit computation over all ranks, observe mode, the run-log line and wandb.

A runtime is the object a spec's inserted code calls as ``__otca__``; one lives in each process,
built as ``Class(config, spec)`` from the spec's ``runtime = "module:Class"``. A trainer that follows
its family's skeleton uses the family runtime itself (``dancegrpo.GrpoRuntime``,
``flowgrpo.FlowGrpoRuntime``); one whose hook points call more subclasses it. Methods that no hook calls (the runtime's own
machinery) are listed in ``INTERNAL`` so the spec meta-test can tell them apart.
"""
from __future__ import annotations

import sys
from typing import Optional

import torch

from . import rank_check
from ..config import OtcaConfig
from ..target_options import given_target_flags
from ..credit import credit_from_progress
from ..devices import follows_trainer, reward_device
from .distributed import gather_rows, local_rows, world
from ..objective_set import Objectives, UpstreamRewards
from ..runlog import RunLog
from ..samples import SampleKeeper
from .monitoring import WandbRows, wandb_scalars
from .timing_probe import TimingProbe, heatmap


class Runtime:
    """State of the layer inside one trainer process (one rank)."""

    #: the rewards the upstream trainer computes itself (a target with several overrides this)
    upstream_rewards = UpstreamRewards()
    #: where upstream's wandb log of a step falls relative to ``write_record`` ("next": after it, as
    #: DanceGRPO's loop; "current": before it); see ``monitoring``
    upstream_logs_step = "current"
    #: why the runner picked ``spec`` for the file (several upstreams can share a path): in the run log
    spec_chosen = ""
    #: public methods no hook point calls: the runtime calls them itself, or tests and tools do
    INTERNAL = frozenset({"describe", "reset", "bind_objectives", "credit", "choose", "credit_record",
                          "write_record", "number_groups", "observing", "place_objectives", "spec_record",
                          "objective_matrix", "assign_credit", "keep_samples"})

    def __init__(self, config: OtcaConfig, spec):
        self.config = config
        #: the target's spec (``hooks.spec.TargetSpec``): its flags, and the file run-time errors name
        self.spec = spec
        self.credit_config = config.credit_config()
        self.objectives: Optional[Objectives] = None
        self.log = RunLog(config.otca_log_dir)
        #: a few decoded samples of the first and the latest step, beside the run log (rank 0)
        self.sample_keeper = SampleKeeper(config.otca_log_dir)
        self.wandb_rows = WandbRows()
        #: --otca_objective_timing probe: the map decided[k, t] measured on a schedule (docs/credit.md 9.3)
        self.timing_probe = TimingProbe(config)
        self.step = 0
        self.reset()

    @property
    def observing(self) -> bool:
        """``--otca_observe``: everything is computed and logged, upstream's values are trained."""
        return self.config.otca_observe

    def bind_objectives(self, upstream_rewards: Optional[UpstreamRewards] = None, device=None,
                        check_weights: bool = True) -> None:
        """Load the objectives: registry models on ``--otca_reward_device``, else ``device`` (the
        trainer's, when known), else this rank's GPU ``cuda:{LOCAL_RANK}`` (``devices.reward_device``).
        ``check_weights=False``: the weights' count is checked later (upstream's rewards not known yet)."""
        config = self.config
        if upstream_rewards is not None:
            self.upstream_rewards = upstream_rewards
        device = reward_device(config.otca_reward_device, device)
        loaded = self.objectives.reward_set if self.objectives is not None else None  # a rebinding keeps them
        self.objectives = Objectives(config.otca_rewards, self.upstream_rewards, config.otca_reward_ckpt,
                                     config.otca_reward_opt, device,
                                     weights=config.otca_objective_weights if check_weights else None,
                                     reward_set=loaded)

    def place_objectives(self, device) -> None:
        """Before each scoring: registry models follow the device upstream's tensors are on (unless
        ``--otca_reward_device`` pins one), so weights and inputs always share one GPU."""
        device = torch.device(device)
        reward_set = self.objectives.reward_set if self.objectives is not None else None
        if reward_set is None or device.type != "cuda" or not follows_trainer(self.config.otca_reward_device):
            return
        if reward_set.device != device:
            print(f"otca-patch: registry reward models move from {reward_set.device} to {device}, where this "
                  f"rank's trainer works", file=sys.stderr)
            reward_set.to(device)

    def objective_matrix(self, upstream, samples: list, device) -> torch.Tensor:
        """``[B, K]`` rewards of this rank's rollouts on ``device`` (the trainer's: registry models are
        placed there first): upstream's ``upstream`` and the registry's scores of the decoded ``samples``
        (with ``self.prompts``; none kept: upstream's objectives only)."""
        self.place_objectives(device)
        return self.objectives.matrix(upstream, samples or None, self.prompts, self.config.otca_video_frames).to(device)

    def describe(self) -> str:
        kind = "observe (trains vanilla)" if self.observing else f"mode {self.credit_config.mode}"
        names = self.objectives.names if self.objectives is not None else self.config.otca_rewards
        extra = "".join(f"; --{name}" for name in given_target_flags(self.config))
        return f"{kind}; objectives {', '.join(names)}; log {self.log.path}{extra}"

    def reset(self) -> None:
        """Forget the previous training step (called before each one)."""
        self.record = None
        self.timing_probe.start_step(self.step + 1)

    # ---- the credit, once per training step, over the samples of all ranks
    def number_groups(self, labels: torch.Tensor) -> torch.Tensor:
        """Group ids ``[N]`` from the gathered per-sample group labels ``[N]`` (here: the labels)."""
        return labels

    def credit(self, rewards: torch.Tensor, delta_s: torch.Tensor, labels: torch.Tensor):
        """This rank's rows of every credit tensor (plus ``group_ids``) and the run's summary.

        rewards ``[B, K]``, delta_s ``[B, S]`` (TCD's progress, computed where the latents are: only
        these small tensors travel between ranks), labels ``[B]`` (the samples' groups); every rank
        has the same B.
        """
        batch, device = delta_s.shape[0], delta_s.device
        group_ids = self.number_groups(gather_rows(labels.to(device)))
        gathered = gather_rows(rewards.to(device))
        timing = self.timing_probe.map_for_credit()  # the probes before this step's (None: not yet measured)
        result = credit_from_progress(gathered, gather_rows(delta_s), group_ids, self.credit_config,
                                      timing_map=None if timing is None else timing.to(device))
        self.timing_probe.measure(gathered, group_ids, batch)
        local = {name: local_rows(value, batch) for name, value in result.tensors().items()}
        local["group_ids"] = local_rows(group_ids, batch)
        summary = result.summary()
        summary["reward_mean_per_objective"] = gathered.double().nanmean(dim=0).tolist()  # over every rank's samples
        summary["objective_advantage_mean"] = result.objective_advantages.mean(dim=0).tolist()
        return local, summary

    def assign_credit(self, rewards: torch.Tensor, delta_s: torch.Tensor, labels: torch.Tensor, steps: torch.Tensor,
                      upstream_trained: torch.Tensor, upstream_advantages: torch.Tensor, rows=None, **record):
        """One training step's credit, the sequence every target runs: the credit over all ranks
        (``credit``), this rank's ``rows`` of it, each row's trained columns, what trains (``choose``)
        and the run-log record (``credit_record``, with ``record``'s extra fields).

        A target supplies only what differs: ``rows [R]`` (default all; best-of-n: the rollouts
        upstream kept, taken after the groups were normalised over every rollout) and ``steps [R, C]``,
        the step each trained column holds (column c of row r trains step ``steps[r, c]``);
        ``upstream_trained [R, C]`` is upstream's value in that place (observe mode trains it).
        Returns ``(local, trained [R, C])``: this rank's chosen rows of every credit tensor."""
        local, summary = self.credit(rewards, delta_s, labels)
        if rows is not None:
            record.update(rollout_rewards=rewards, rollout_delta_s=local["delta_s"],
                          rollout_group_ids=local["group_ids"])
            picked = rows.to(delta_s.device)
            local = {name: value[picked] for name, value in local.items()}
            rewards = rewards[rows.to(rewards.device)]
        advantages = local["advantages"]
        trained = self.choose(advantages.gather(1, steps.to(advantages.device)), upstream_trained)
        self.record = self.credit_record(local, summary, rewards, trained, upstream_advantages, **record)
        return local, trained

    def choose(self, otca: torch.Tensor, upstream: torch.Tensor) -> torch.Tensor:
        """What is trained: upstream's value in observe mode (untouched: bit-identical training),
        else OTCA's, in upstream's dtype and device and shape."""
        if self.observing:
            return upstream
        return otca.to(device=upstream.device, dtype=upstream.dtype).reshape(upstream.shape).contiguous()

    def credit_record(self, local: dict, summary: dict, rewards, trained, upstream_advantages, **extra) -> dict:
        """The run-log fields every target writes about one step's credit."""
        return {
            "group_ids": local["group_ids"], "rewards": rewards, "delta_s": local["delta_s"],
            "step_weights": local["step_weights"], "mixture": local["mixture"], "combined": local["combined"],
            "lambdas": local["lambdas"], "objective_advantages": local["objective_advantages"],
            "advantages": trained, "upstream_advantages": upstream_advantages, "summary": summary, **extra,
        }

    # ---- the run log: one line per training step and rank
    def write_record(self, wandb_step: Optional[int] = None, **fields_) -> bool:
        """Write this step's record (with ``fields_``) and its summary to wandb; warn and return
        False when the step computed no credit."""
        if self.record is None:
            print("otca-patch: warning: a training step ended without computing advantages", file=sys.stderr)
            return False
        self.step += 1
        rank, size = world()
        record = {
            "step": self.step, "rank": rank, "world_size": size, "mode": self.credit_config.mode,
            "observe": self.observing, "config": self.credit_config.to_dict(),
            "objectives": list(self.objectives.names), "spec": self.spec_record(), **self.record,
            **self.timing_probe.record_fields(), **fields_,
        }
        if self.step == 1 and rank_check.result() is not None:
            record["rank_check"] = rank_check.result()  # the first record says every rank ran the same layer
        self.log.write(record)
        if rank == 0:
            self.sample_keeper.end_step(self.step)
        self._to_wandb(rank, record["summary"], wandb_step)
        return True

    def keep_samples(self, samples, prompts) -> None:
        """Decoded samples of a rollout batch and their prompts: rank 0 keeps a few as PNGs
        (``samples``; ``otca-patch compare`` shows them side by side)."""
        if world()[0] == 0:
            self.sample_keeper.add(samples, prompts)

    def spec_record(self) -> Optional[dict]:
        """The run log's one record of the spec (docs/run-log.md): which spec rewrote which file (a
        ``--otca_target`` copy's path included), the skeletons it extends, and why it was picked."""
        spec = self.spec
        if spec is None:
            return None
        return {"target": spec.name, "upstream": spec.upstream, "file": spec.file, "path": spec.path,
                "extends": list(spec.extends), "chosen": self.spec_chosen}

    def _to_wandb(self, rank: int, summary: dict, step: Optional[int]) -> None:
        """This step's ``otca/`` numbers on upstream's wandb row of the same step (``monitoring``)."""
        wandb = sys.modules.get("wandb")
        if rank != 0 or wandb is None or getattr(wandb, "run", None) is None:
            return
        scalars = wandb_scalars(summary, self.objectives.names)
        if self.timing_probe.new_map is not None:  # the map pooled with this step's probe
            scalars["otca/objective_timing"] = wandb.Image(
                heatmap(self.timing_probe.new_map).numpy(),
                caption=f"decided: rows {', '.join(self.objectives.names)}; columns steps 1..{self.timing_probe.new_map.shape[1]}")
        self.wandb_rows.log(scalars, "explicit" if step is not None else self.upstream_logs_step, step)
