"""One comparison: the cached base model, then GRPO under each credit variant and seed from the same
weights (runs paired by seed); returns plain numbers for the report and ``metrics.json``."""
from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Optional

import torch

from .config import BASE_MODEL_FORMAT, DemoConfig
from .evaluation import gap_closed
from .files import atomic_write_json
from .jobs import Job, run_jobs
from .pretrain import load_or_train_base_model
from .sampling import sigma_schedule
from ..analysis.intervals import mean_interval, pareto_verdict


def configure_torch(config: DemoConfig) -> None:
    if config.threads:
        torch.set_num_threads(config.threads)


def ensure_base_model(config: DemoConfig, log=print) -> dict:
    """Train (or find) the cached base model; returns its info (``path``, ``cached``, ``final_loss``)."""
    configure_torch(config)
    _, info = load_or_train_base_model(config, log=log)
    return info


def run_experiment(config: DemoConfig, modes: Optional[list] = None, seeds: Optional[list] = None, log=print) -> dict:
    """GRPO under each of ``modes`` (default ``config.mode_list()``; the first is the reference) for each
    of ``seeds`` (default ``config.seed_list()``). Returns the dict of ``summarise``, plus ``seconds``."""
    from .variants import check_available

    modes, seeds = modes or config.mode_list(), seeds or config.seed_list()
    check_available(modes)
    started, cpu_started = time.perf_counter(), time.process_time()
    info = ensure_base_model(config, log=log)
    base_seconds, base_cpu = time.perf_counter() - started, time.process_time() - cpu_started
    jobs = [Job(config=config.to_dict(), mode=mode, seed=seed, base_path=info["path"]) for seed in seeds for mode in modes]
    outputs = _run_or_resume(jobs, config, log)
    result = summarise(config, jobs, outputs, info)
    result["seconds"] = {"base_model": base_seconds, "base_model_cpu": base_cpu,
                         "grpo_cpu": sum(o["cpu_seconds"] for o in outputs), "total": time.perf_counter() - started}
    return result


def _run_or_resume(jobs: list, config: DemoConfig, log) -> list:
    """Run the jobs; with ``config.resume``, keep each finished run under ``<out>/finished_runs/`` and
    reuse those whose variant, seed and every training field match."""
    if not config.resume:
        return run_jobs(jobs, config.workers, config)
    folder = Path(config.out) / "finished_runs"
    ignored = ("out", "modes", "seeds", "workers", "threads", "quiet", "resume", "base_cache", "threshold")
    setting = {k: v for k, v in config.to_dict().items() if k not in ignored}

    def path(job):
        payload = json.dumps({"setting": setting, "mode": job.mode, "seed": job.seed, "format": BASE_MODEL_FORMAT},
                             sort_keys=True)
        return folder / f"{job.mode}-seed{job.seed}-{hashlib.sha256(payload.encode()).hexdigest()[:12]}.json"

    outputs = {i: json.loads(path(job).read_text()) for i, job in enumerate(jobs) if path(job).is_file()}
    if outputs:
        log(f"reusing {len(outputs)} finished runs from {folder}")
    missing = [i for i in range(len(jobs)) if i not in outputs]
    fresh = run_jobs([jobs[i] for i in missing], config.workers, config,
                     on_result=lambda index, output: atomic_write_json(path(jobs[missing[index]]), output))
    outputs.update(zip(missing, fresh))
    return [outputs[i] for i in range(len(jobs))]


#: The gradient-conflict diagnostic per run (``gradients.conflict_diagnostic``, every update):
#: the share of updates in which some objective's gradient has a negative cosine with the applied
#: update, and the mean over updates of the worst objective's cosine.
CONFLICT_COLUMNS = ("gradient_conflict", "worst_cosine")


def conflict_summary(history: dict) -> dict:
    """``{"gradient_conflict", "worst_cosine"}`` of one run from its per-iteration history (NaN when
    the run did not compute the diagnostic)."""
    from .gradients import nanmean

    return {"gradient_conflict": nanmean(history.get("gradient_conflict", [])),
            "worst_cosine": nanmean(history.get("worst_cosine", []))}


def summarise(config: DemoConfig, jobs: list, outputs: list, info: dict) -> dict:
    """Job outputs -> ``config``, ``objectives``, ``base``/``oracle`` (per-objective eval means),
    ``runs`` (``mode``, ``seed``, ``final``, ``gap_closed``, ``drift``, the conflict diagnostic,
    ``history``), ``table`` (per variant: mean and 95% interval over seeds of every objective's gap
    closed, their mean, the drift and the conflict diagnostic), ``comparisons`` (each variant against
    the first, paired by seed) and ``verdicts``."""
    OBJECTIVES = config.objectives  # noqa: N806 (the regime's objectives, in reward-column order)
    base_rewards = torch.tensor(outputs[0]["base_eval"])  # identical in every job: same model, same eval set
    base_mean, oracle_mean = base_rewards.mean(0), torch.tensor(outputs[0]["oracle_eval"]).mean(0)
    runs = []
    for job, output in zip(jobs, outputs):
        history = output["history"]
        final = torch.tensor(history["eval_rewards"][-1])
        closed = gap_closed(final, base_mean, oracle_mean)
        runs.append({"mode": job.mode, "seed": job.seed, "final": dict(zip(OBJECTIVES, final.tolist())),
                     "gap_closed": dict(zip(OBJECTIVES, closed.tolist())), "mean_gap_closed": float(closed.mean()),
                     "drift": history["drift"][-1], **conflict_summary(history),
                     "seconds": output["seconds"], "history": history})
    modes = list(dict.fromkeys(job.mode for job in jobs))
    seeds = list(dict.fromkeys(job.seed for job in jobs))
    by = {(r["mode"], r["seed"]): r for r in runs}
    columns = list(OBJECTIVES) + ["mean_gap_closed", "drift"] + list(CONFLICT_COLUMNS)

    def value(run, column):
        return run["gap_closed"][column] if column in OBJECTIVES else run[column]

    table = {m: {c: mean_interval([value(by[m, s], c) for s in seeds]) for c in columns} for m in modes}
    reference = modes[0]
    comparisons, verdicts = {}, {}
    # the practical threshold in gap-closed units: --threshold base-model sample stds of each objective
    spread = (base_rewards.std(0) / (oracle_mean - base_mean).abs().clamp_min(1e-12)).tolist()
    thresholds = {k: config.threshold * s for k, s in zip(OBJECTIVES, spread)}
    for mode in modes[1:]:
        comparisons[mode] = {c: mean_interval([value(by[mode, s], c) - value(by[reference, s], c) for s in seeds],
                                              threshold=thresholds.get(c)) for c in columns}
        verdicts[mode] = pareto_verdict({k: comparisons[mode][k] for k in OBJECTIVES}, mode, reference)
    improves_all = {m: [s for s in seeds if all(by[m, s]["gap_closed"][k] > 0 for k in OBJECTIVES)] for m in modes}
    return {
        "config": config.to_dict(),
        "regime": config.regime,
        "objectives": list(OBJECTIVES),
        "sigmas": sigma_schedule(config.sampling_steps, config.shift).tolist(),
        "base": dict(zip(OBJECTIVES, base_mean.tolist())),
        "oracle": dict(zip(OBJECTIVES, oracle_mean.tolist())),
        "base_model": info,
        "eval_samples": int(base_rewards.shape[0]),
        "modes": modes,
        "seeds": seeds,
        "reference_mode": reference,
        "runs": runs,
        "table": table,
        "comparisons": comparisons,
        "verdicts": verdicts,
        "thresholds": thresholds,
        "seeds_improving_every_objective": improves_all,
        "samples": shown_samples(jobs, outputs, seeds[0]),
    }


def shown_samples(jobs: list, outputs: list, seed: int) -> dict | None:
    """The report's ``samples.png``: each variant's images of the shown prompts before and after
    training, from the runs of ``seed`` (None when those runs kept none: finished before they did)."""
    kept = [(job.mode, output["samples"]) for job, output in zip(jobs, outputs)
            if job.seed == seed and "samples" in output]
    if not kept:
        return None
    first = kept[0][1]
    return {"seed": seed, "prompts": first["prompts"], "iterations": first["iterations"],
            "first": {mode: samples["first"] for mode, samples in kept},
            "last": {mode: samples["last"] for mode, samples in kept}}
