"""Runs against a real upstream checkout: found through ``upstream/<name>`` (the git submodule) or
``OTCA_UPSTREAM_<NAME>``; every test here skips, with that reason, when there is none."""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
SMOKE = REPO / "scripts" / "smoke_upstream.py"


def upstream_checkout(name: str, env_var: str, marker_file: str) -> Path:
    candidates = [Path(os.environ[env_var])] if os.environ.get(env_var) else []
    candidates.append(REPO / "upstream" / name)
    for candidate in candidates:
        if (candidate / marker_file).is_file():
            return candidate.resolve()
    pytest.skip(f"no {name} checkout: set {env_var} or populate upstream/{name} "
                f"(git submodule update --init upstream/{name}); CI has no network to fetch it")


def require_upstream_packages() -> None:
    missing = [m for m in ("peft", "liger_kernel", "einops", "wandb", "cv2", "decord")
               if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"the upstream trainer needs {', '.join(missing)}: pip install -e '.[upstream]'")


@pytest.fixture(scope="session")
def dancegrpo() -> Path:
    require_upstream_packages()
    return upstream_checkout("DanceGRPO", "OTCA_UPSTREAM_DANCEGRPO", "fastvideo/train_grpo_flux.py")


class SmokeRun:
    """One finished smoke run: smoke.json, the run log (if any), the recorded loss terms."""

    def __init__(self, out: Path, completed: subprocess.CompletedProcess):
        self.out, self.completed = out, completed
        self.result = json.loads((out / "smoke.json").read_text()) if (out / "smoke.json").exists() else None
        log = out / "run_log.jsonl"
        self.log = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        self.terms = {int(p.stem.removeprefix("terms_rank")): torch.load(p, weights_only=True)
                      for p in out.glob("terms_rank*.pt")}

    @property
    def losses(self):
        return [s["loss"] for s in self.result["steps"]]

    @property
    def grad_norms(self):
        return [s["grad_norm"] for s in self.result["steps"]]


def run_smoke(upstream: Path, out: Path, *flags: str, env: dict | None = None, nproc: int = 1,
              check: bool = True) -> SmokeRun:
    command = [sys.executable, str(SMOKE), str(upstream), str(out), *flags]
    if nproc > 1:
        command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
                   "--master_port", str(29700 + os.getpid() % 200), str(SMOKE), str(upstream), str(out), *flags]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=900,
                               env={**os.environ, **(env or {})}, cwd=REPO)
    if check and completed.returncode != 0:
        raise AssertionError(f"smoke run failed ({completed.returncode}):\n{completed.stderr[-4000:]}")
    return SmokeRun(out, completed)
