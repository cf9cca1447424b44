"""The upstream checkout a command is given: a clear error when it does not exist or is an empty
submodule, saying how to fill it (also offline)."""
from __future__ import annotations

from pathlib import Path

from .spec import load_specs


def upstream_env_var(upstream: str) -> str:
    """``DanceGRPO`` -> ``OTCA_UPSTREAM_DANCEGRPO``; ``flow_grpo`` -> ``OTCA_UPSTREAM_FLOW_GRPO``."""
    return f"OTCA_UPSTREAM_{upstream.upper()}"


def _how_to_fill(path: Path) -> str:
    """Fill instructions for the upstream the folder is named after (else for every known one)."""
    pinned = {spec.upstream: spec.verified_commit for spec in load_specs()}
    named = [u for u in pinned if u.lower() == path.name.lower()] or sorted(pinned)
    lines = []
    for upstream in named:
        snapshot = f"{upstream}-{pinned[upstream][:7]}.tar.gz"
        lines.append(
            f"  {upstream}: `git submodule update --init upstream/{upstream}` (needs network); offline, unpack "
            f"a source snapshot of commit {pinned[upstream][:12]} into it (e.g. `tar xzf "
            f"../shared/upstream/{snapshot} --strip-components 1 -C upstream/{upstream}`) or pass a checkout "
            f"elsewhere (`${upstream_env_var(upstream)}`, which the tests and scripts read)")
    return "\n".join(lines)


def check_upstream_dir(path: Path) -> None:
    """ValueError naming what is wrong with ``path`` as an upstream checkout, and how to fix it."""
    if not path.exists():
        raise ValueError(f"{path} does not exist; pass an upstream checkout (e.g. upstream/DanceGRPO)")
    if not path.is_dir():
        raise ValueError(f"{path} is not a folder; pass an upstream checkout (e.g. upstream/DanceGRPO)")
    if not any(entry.name != ".git" for entry in path.iterdir()):
        raise ValueError(f"{path} is empty: the upstream git submodule is not checked out. Fill it:\n"
                         + _how_to_fill(path))
