"""Declarative hook-point specs (``patches/<upstream>/<script>.toml``): what is intercepted in an
upstream file and how it is recognised, so a new upstream release is checked, not guessed.

A spec has a ``[target]`` table, ``[[hooks]]`` (code spliced in at an anchor; ``reads`` lists every
upstream name that code reads, each checked to be bound in the hook's function) and ``[[pins]]``
(anchors that insert nothing and must hold: facts about upstream the inserted code relies on, such
as the column index it trains). The format is documented in each spec's header and in the README.
"""
from __future__ import annotations

import ast
import builtins
import os
from dataclasses import dataclass, field
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ACTIONS = ("insert_after", "insert_before", "replace")
PIN = "pin"  # the action of a [[pins]] entry: matched, never applied
MODULE_SCOPE = "<module>"
#: names inserted code may use without listing them in ``reads``: the runtime and the matched node
LAYER_NAMES = frozenset({"__otca__", "__match__"})


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
    reads: tuple = ()  # upstream names ``code`` reads: each must be bound in ``function``

    @property
    def is_pin(self) -> bool:
        return self.action == PIN


@dataclass(frozen=True)
class TargetSpec:
    """All hook points of one upstream script, and the upstream state they were verified on."""

    name: str
    upstream: str
    file: str  # path inside the upstream checkout, "/"-separated
    runtime: str  # module defining ``TARGET`` (otca_patch.targets.descriptor.Target): the runtime the rewritten code calls
    verified_commit: str
    verified_sha256: str
    hooks: tuple[Hook, ...]
    pins: tuple[Hook, ...] = ()  # check-only anchors (action "pin")
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
    hooks = tuple(_load_entry(path, "hooks", position, entry) for position, entry in enumerate(data.get("hooks", [])))
    pins = tuple(_load_entry(path, "pins", position, entry) for position, entry in enumerate(data.get("pins", [])))
    if not hooks:
        raise ValueError(f"hook spec {path}: no [[hooks]] entries")
    names = [h.name for h in hooks + pins]
    if len(set(names)) != len(names):
        raise ValueError(f"hook spec {path}: hook and pin names repeat: {names}")
    return TargetSpec(hooks=hooks, pins=pins, path=str(path), notes=data.get("notes", {}),
                      **{k: target[k] for k in ("name", "upstream", "file", "runtime",
                                                  "verified_commit", "verified_sha256")},
                      description=target.get("description", ""))


_HOOK_KEYS = {"name", "function", "anchor", "action", "code", "count", "within", "why", "reads"}
_PIN_KEYS = {"name", "function", "anchor", "count", "within", "why"}


def _load_entry(path: Path, table: str, position: int, entry: dict) -> Hook:
    """One ``[[hooks]]`` or ``[[pins]]`` entry, validated; errors name the file and the entry."""
    where = f"hook spec {path}: {table}[{position}]"
    pin = table == "pins"
    for key in ("name", "function", "anchor") + (() if pin else ("action", "code")):
        if not isinstance(entry.get(key), str) or not entry.get(key):
            raise ValueError(f"{where} lacks a non-empty string {key!r}")
    label = f"{where} ({entry['name']})"
    unknown = set(entry) - (_PIN_KEYS if pin else _HOOK_KEYS)
    if unknown:
        raise ValueError(f"{label}: unknown keys {sorted(unknown)}")
    count = entry.get("count", 1)
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise ValueError(f"{label}: count must be a positive integer, got {count!r}")
    if pin:
        return Hook(action=PIN, code="", **entry)
    if entry["action"] not in ACTIONS:
        raise ValueError(f"{label}: action {entry['action']!r} is not one of {', '.join(ACTIONS)}")
    reads = entry.get("reads")
    if not isinstance(reads, list) or not all(isinstance(n, str) and n.isidentifier() for n in reads):
        raise ValueError(f"{label}: `reads` must list the upstream names its code reads (a list of identifiers, "
                         f"[] when it reads none), got {reads!r}")
    try:
        used = names_read(entry["code"])
    except SyntaxError as exc:
        raise ValueError(f"{label}: code does not parse ({exc.msg})") from None
    if set(reads) != used:
        raise ValueError(f"{label}: `reads` must name exactly the upstream names its code reads: code reads "
                         f"{sorted(used)}, reads lists {sorted(reads)}")
    return Hook(**{**entry, "reads": tuple(reads)})


def names_read(code: str) -> set[str]:
    """Names ``code`` reads before binding them itself (statement by statement), except builtins and
    the layer's own names: the upstream names the code relies on."""
    read, bound = set(), set()
    for statement in ast.parse(code).body:
        names = [n for n in ast.walk(statement) if isinstance(n, ast.Name)]
        read |= {n.id for n in names if isinstance(n.ctx, ast.Load)} - bound
        bound |= {n.id for n in names if not isinstance(n.ctx, ast.Load)}
    return read - LAYER_NAMES - set(dir(builtins))


def load_specs(directory: str | os.PathLike | None = None) -> list[TargetSpec]:
    """Every ``*.toml`` spec under ``directory`` (default: ``default_patches_dir()``), sorted by path."""
    directory = Path(directory) if directory is not None else default_patches_dir()
    if not directory.is_dir():
        raise ValueError(f"hook specs: directory {directory} does not exist (set OTCA_PATCHES_DIR)")
    return [load_spec(p) for p in sorted(directory.rglob("*.toml"))]


def spec_for_script(script: str | os.PathLike, specs: list[TargetSpec] | None = None) -> TargetSpec | None:
    """The spec for upstream file ``script``, or ``None`` when the layer does not target it. Where
    several specs share the path, the file's content picks one (``select.choose_spec``)."""
    from .select import spec_choice_for_script

    choice = spec_choice_for_script(script, specs)
    return None if choice is None else choice.spec
