"""Declarative hook-point specs (``patches/<upstream>/<script>.toml``): what is intercepted in an
upstream file and how it is recognised, so a new upstream release is checked, not guessed."""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10, as both upstream training environments use
    import tomli as tomllib

ACTIONS = ("insert_after", "insert_before", "replace")
MODULE_SCOPE = "<module>"


@dataclass(frozen=True)
class Hook:
    """One interception: in ``function``, the nodes matching ``anchor`` (exactly ``count`` of them,
    optionally only inside nodes matching ``within``) get ``code`` inserted or substituted."""

    name: str
    function: str
    anchor: str
    action: str
    code: str
    count: int = 1
    within: str = ""
    why: str = ""


@dataclass(frozen=True)
class TargetSpec:
    """All hook points of one upstream script, and the upstream state they were verified on."""

    name: str
    upstream: str
    file: str  # path inside the upstream checkout, "/"-separated
    runtime: str  # module providing ``install(config, module_globals)`` for the rewritten code
    verified_commit: str
    verified_sha256: str
    hooks: tuple[Hook, ...]
    path: str = ""  # the spec file itself
    description: str = ""
    notes: dict = field(default_factory=dict)

    def matches_script(self, script: str | os.PathLike) -> bool:
        """Whether a launched script path is this spec's upstream file (by its trailing path)."""
        parts = Path(os.path.abspath(script)).parts
        want = tuple(self.file.split("/"))
        return parts[-len(want):] == want


#: the specs shipped inside the package (in a checkout, a link to the top-level ``patches/``)
PACKAGED_PATCHES_DIR = Path(__file__).resolve().parents[1] / "patches"


def default_patches_dir() -> Path:
    """``$OTCA_PATCHES_DIR`` or the specs shipped inside the package."""
    override = os.environ.get("OTCA_PATCHES_DIR")
    return Path(override) if override else PACKAGED_PATCHES_DIR


def load_spec(path: str | os.PathLike) -> TargetSpec:
    """Parse and validate one spec file; errors name the file and the offending entry."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"hook spec {path}: cannot be read ({exc})") from None
    target = data.get("target")
    if not isinstance(target, dict):
        raise ValueError(f"hook spec {path}: missing [target] table")
    missing = [key for key in ("name", "upstream", "file", "runtime", "verified_commit", "verified_sha256")
               if not isinstance(target.get(key), str) or not target.get(key)]
    if missing:
        raise ValueError(f"hook spec {path}: [target] lacks {', '.join(missing)}")
    hooks = []
    for position, entry in enumerate(data.get("hooks", [])):
        where = f"hook spec {path}: hooks[{position}]"
        for key in ("name", "function", "anchor", "action", "code"):
            if not isinstance(entry.get(key), str) or not entry.get(key):
                raise ValueError(f"{where} lacks a non-empty string {key!r}")
        if entry["action"] not in ACTIONS:
            raise ValueError(f"{where} ({entry['name']}): action {entry['action']!r} is not one of {', '.join(ACTIONS)}")
        count = entry.get("count", 1)
        if not isinstance(count, int) or count < 1:
            raise ValueError(f"{where} ({entry['name']}): count must be a positive integer, got {count!r}")
        unknown = set(entry) - {"name", "function", "anchor", "action", "code", "count", "within", "why"}
        if unknown:
            raise ValueError(f"{where} ({entry['name']}): unknown keys {sorted(unknown)}")
        hooks.append(Hook(**entry))
    if not hooks:
        raise ValueError(f"hook spec {path}: no [[hooks]] entries")
    names = [h.name for h in hooks]
    if len(set(names)) != len(names):
        raise ValueError(f"hook spec {path}: hook names repeat: {names}")
    return TargetSpec(hooks=tuple(hooks), path=str(path), notes=data.get("notes", {}),
                      **{k: target[k] for k in ("name", "upstream", "file", "runtime",
                                                  "verified_commit", "verified_sha256")},
                      description=target.get("description", ""))


def load_specs(directory: str | os.PathLike | None = None) -> list[TargetSpec]:
    """Every ``*.toml`` spec under ``directory`` (default: ``default_patches_dir()``), sorted by path."""
    directory = Path(directory) if directory is not None else default_patches_dir()
    if not directory.is_dir():
        raise ValueError(f"hook specs: directory {directory} does not exist (set OTCA_PATCHES_DIR)")
    return [load_spec(p) for p in sorted(directory.rglob("*.toml"))]


def spec_for_script(script: str | os.PathLike, specs: list[TargetSpec] | None = None) -> TargetSpec | None:
    """The spec whose upstream file is ``script``, or ``None`` when the layer does not target it."""
    for spec in specs if specs is not None else load_specs():
        if spec.matches_script(script):
            return spec
    return None
