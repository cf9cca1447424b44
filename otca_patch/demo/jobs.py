"""GRPO runs as independent jobs (one per (seed, mode)), inline or in worker processes.

Each job rebuilds everything from the config and the cached base model file, with one torch thread,
so a job's numbers are the same whether it runs inline or in a worker: the 2 CPU cores are used by
running two modes at once rather than by splitting tiny matrix products across threads.
"""
from __future__ import annotations

import multiprocessing
import queue
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from typing import Callable, Optional

import torch

from .config import DemoConfig
from .evaluation import evaluate, make_eval_set
from .progress import TickBar


@dataclass(frozen=True)
class Job:
    config: dict  # DemoConfig.to_dict()
    mode: str  # a name of variants.VARIANTS
    seed: int
    base_path: str  # the cached base model file

    @property
    def label(self) -> str:
        return f"seed {self.seed} {self.mode}"


def run_job(job: Job, on_iteration: Optional[Callable[[], None]] = None) -> dict:
    """Load the base model, evaluate it, train ``job.mode``; returns ``{"history", "base_eval",
    "oracle_eval", "samples", "seconds", "cpu_seconds"}`` (``samples``: ``first`` and ``last``, the
    images of ``evaluation.shown_set`` before and after training)."""
    from .data import prompt_text
    from .evaluation import oracle_rewards, sample_images, shown_set
    from .grpo import train_mode
    from .pretrain import build_model
    from .variants import VARIANTS

    config = DemoConfig(**job.config)
    if config.threads:
        torch.set_num_threads(config.threads)
    started, cpu_started = time.perf_counter(), time.process_time()
    model = build_model(config)
    saved = torch.load(job.base_path, map_location="cpu", weights_only=True)
    model.load_state_dict(saved["state_dict"])
    model.eval()
    eval_set = make_eval_set(config, model.token_shape)
    base = evaluate(model, eval_set, config)
    base_rewards = base.rewards
    shown = shown_set(eval_set, config)
    first = sample_images(model, shown, config)
    trained, history = train_mode(model, config, VARIANTS[job.mode], job.seed, eval_set, base_rewards.mean(0).tolist(),
                                  on_iteration=on_iteration, base_timing=base.timing)
    samples = {"prompts": prompt_text(shown.prompt_ids), "iterations": [0, config.grpo_steps], "first": first,
               "last": sample_images(trained, shown, config)}
    return {"history": asdict(history), "base_eval": base_rewards.tolist(),
            "oracle_eval": oracle_rewards(eval_set, config).tolist(), "samples": samples,
            "seconds": time.perf_counter() - started, "cpu_seconds": time.process_time() - cpu_started}


def _worker(job: Job, ticks) -> dict:
    return run_job(job, on_iteration=lambda: ticks.put(1))


def run_jobs(jobs: list, workers: int, config: DemoConfig, desc: str = "GRPO",
             on_result: Optional[Callable[[int, dict], None]] = None) -> list:
    """Run every job; results in the order of ``jobs``. ``workers <= 1`` runs them inline.
    ``on_result(index, output)`` is called as each job finishes (to keep finished runs)."""
    on_result = on_result or (lambda index, output: None)
    if workers <= 1 or len(jobs) <= 1:
        results = []
        for index, job in enumerate(jobs):
            bar = TickBar(config.grpo_steps, config, desc=f"{desc} {job.label}")
            results.append(run_job(job, on_iteration=lambda: bar.update(1)))
            on_result(index, results[-1])
            bar.close()
        return results
    context = multiprocessing.get_context("spawn")  # no fork of a process that holds torch threads
    with context.Manager() as manager, ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=context) as pool:
        ticks = manager.Queue()
        futures = [pool.submit(_worker, job, ticks) for job in jobs]
        reported = set()
        bar = TickBar(len(jobs) * config.grpo_steps, config,
                      desc=f"{desc} ({len(jobs)} runs, {min(workers, len(jobs))} processes)")
        while len(reported) < len(futures):
            for index, future in enumerate(futures):
                if index not in reported and future.done():
                    reported.add(index)
                    on_result(index, future.result())
            try:
                ticks.get(timeout=0.2)
                bar.update(1)
            except queue.Empty:
                pass
        bar.close()
        return [f.result() for f in futures]
