"""One comparison: the cached base model, then GRPO under each credit mode from the same weights
with the same seeds; returns plain numbers for the report and ``metrics.json``."""
from __future__ import annotations

import time
from typing import Optional

import torch

from .config import DemoConfig
from .evaluation import balanced_score, steps_to_reach
from .jobs import Job, run_jobs
from .objectives import OBJECTIVES
from .pretrain import load_or_train_base_model
from .sampling import sigma_schedule


def configure_torch(config: DemoConfig) -> None:
    if config.threads:
        torch.set_num_threads(config.threads)


def ensure_base_model(config: DemoConfig, log=print) -> dict:
    """Train (or find) the cached base model; returns its info (``path``, ``cached``, ``final_loss``)."""
    configure_torch(config)
    _, info = load_or_train_base_model(config, log=log)
    return info


def run_experiment(config: DemoConfig, modes: Optional[list] = None, log=print) -> dict:
    """GRPO under each of ``modes`` (default ``config.mode_list()``), the first being the reference.

    Returns a JSON-ready dict: ``config``, ``objectives``, ``sigmas``, ``base`` (evaluation means and
    stds, model info), ``reference_mode``, ``modes`` (per mode: ``history``, ``final_rewards``,
    ``balanced``, ``final_balanced``, ``steps_to_reference_final``, ``seconds``) and ``seconds``.
    """
    modes = modes or config.mode_list()
    started = time.perf_counter()
    info = ensure_base_model(config, log=log)
    base_seconds = time.perf_counter() - started
    jobs = [Job(config=config.to_dict(), mode=mode, base_path=info["path"]) for mode in modes]
    outputs = run_jobs(jobs, config.workers, config)
    result = summarise(config, modes, outputs, info)
    result["seconds"] = {"base_model": base_seconds, "total": time.perf_counter() - started}
    return result


def summarise(config: DemoConfig, modes: list, outputs: list, info: dict) -> dict:
    """Turn job outputs (same seed, one per mode) into the result dict of ``run_experiment``."""
    base_rewards = torch.tensor(outputs[0]["base_eval"])  # identical in every job: same model, same eval set
    base_mean, base_std = base_rewards.mean(0), base_rewards.std(0)
    results = {}
    for mode, output in zip(modes, outputs):
        history = output["history"]
        eval_means = torch.tensor(history["eval_rewards"])  # [n_eval, K]
        balanced = balanced_score(eval_means, base_mean, base_std)
        results[mode] = {
            "history": history,
            "final_rewards": dict(zip(OBJECTIVES, eval_means[-1].tolist())),
            "balanced": balanced.tolist(),
            "final_balanced": float(balanced[-1]),
            "seconds": output["seconds"],
        }
    reference = modes[0]
    target = results[reference]["final_balanced"]
    reference_final = results[reference]["final_rewards"]
    for mode in modes:
        history = results[mode]["history"]
        results[mode]["steps_to_reference_final"] = steps_to_reach(history["eval_iterations"], results[mode]["balanced"], target)
        # per objective: when the mode first matches the reference's final value of that objective
        per_objective = torch.tensor(history["eval_rewards"]).T.tolist()  # [K][n_eval]
        results[mode]["steps_to_reference_final_per_objective"] = {
            k: steps_to_reach(history["eval_iterations"], values, reference_final[k])
            for k, values in zip(OBJECTIVES, per_objective)}
    return {
        "config": config.to_dict(),
        "objectives": list(OBJECTIVES),
        "sigmas": sigma_schedule(config.sampling_steps, config.shift).tolist(),
        "base": {"rewards": dict(zip(OBJECTIVES, base_mean.tolist())), "reward_std": dict(zip(OBJECTIVES, base_std.tolist())),
                 "model": info, "eval_samples": int(base_rewards.shape[0])},
        "reference_mode": reference,
        "modes": results,
    }
