"""Declarative hook-point specs (``patches/<upstream>/<script>.toml``): the one place a target is
registered. A spec says which upstream file it patches, what is intercepted there and how it is
recognised (so a new upstream release is checked, not guessed), and what generic code needs to know
about the target: its runtime class, what it writes, its target-only flags and its smoke run.

A spec has a ``[target]`` table, ``[[hooks]]`` (code spliced in at an anchor; ``reads`` lists every
upstream name that code reads, each checked to be bound in the hook's function) and ``[[pins]]``
(anchors that insert nothing and must hold: facts about upstream the inserted code relies on, such
as the column index it trains). ``extends`` names a family skeleton (a file whose name starts with
``_``: not a target itself) whose entries the spec inherits and overrides by name. The format:
``docs/spec-format.md``.
"""
from __future__ import annotations

import ast
import builtins
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..target_options import PROBE_FLAG, target_only_flags

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ACTIONS = ("insert_after", "insert_before", "replace")
PIN = "pin"  # the action of a [[pins]] entry: matched, never applied
MODULE_SCOPE = "<module>"
#: names inserted code may use without listing them in ``reads``: the runtime and the matched node
LAYER_NAMES = frozenset({"__otca__", "__match__"})
#: a spec file whose name starts with this is a family skeleton: extended by specs, never a target
SKELETON_PREFIX = "_"


@dataclass(frozen=True)
class Hook:
    """One interception: in ``function``, the nodes matching ``anchor`` (exactly ``count`` of them,
    optionally only inside nodes matching ``within``) get ``code`` inserted or substituted.
    ``origin``: the file the entry is written in (a skeleton, for an inherited entry)."""

    name: str
    function: str
    anchor: str
    action: str
    code: str
    count: int = 1
    within: str = ""
    why: str = ""
    reads: tuple = ()  # upstream names ``code`` reads: each must be bound in ``function``
    origin: str = field(default="", compare=False)

    @property
    def is_pin(self) -> bool:
        return self.action == PIN


@dataclass(frozen=True)
class Smoke:
    """A target's CPU smoke run: ``module`` (``""``: none) defines ``Sizes`` and ``run``;
    ``objectives``: those of a smoke run given ``--otca`` alone; ``variants``: ``(name, module)``
    pairs, further smoke runs of the same trainer on another model layout (Wan2.2's two experts).

    Or ``harness``: the family's smoke (``otca_patch.smoke.<harness>``) runs the spec's ``file``
    from what the target adds here: ``model`` (a tiny model the harness builds), ``sizes`` (size
    flags and their defaults), ``overrides`` (FlowGRPO: config keys; DanceGRPO: upstream's arguments;
    a value ``"{size}"`` is that size), ``processes`` (the fewest upstream's main runs on),
    ``launcher`` and ``starts_wandb``. A skeleton's table is inherited, ``sizes`` and ``overrides``
    merged key by key."""

    module: str = ""
    objectives: tuple = ("upstream",)
    variants: tuple = ()
    harness: str = ""
    file: str = ""  # the spec's file, for the harness
    model: str = ""
    sizes: dict = field(default_factory=dict)
    overrides: dict = field(default_factory=dict)
    processes: int = 1
    launcher: str = "accelerate"
    starts_wandb: bool = True

    @property
    def runs(self) -> bool:
        """Whether this target has a smoke run of its own (a module or its family's harness)."""
        return bool(self.module or self.harness)


@dataclass(frozen=True)
class TargetSpec:
    """One target: an upstream script's hook points, the upstream state they were verified on, and
    what generic code needs to know about it (runtime class, outputs, target-only flags, smoke)."""

    name: str
    upstream: str
    file: str  # path inside the upstream checkout, "/"-separated
    runtime: str  # "module:Class": the runtime the rewritten code calls as ``__otca__``
    verified_commit: str
    verified_sha256: str
    hooks: tuple[Hook, ...]
    pins: tuple[Hook, ...] = ()  # check-only anchors (action "pin")
    path: str = ""  # the spec file itself
    description: str = ""
    notes: dict = field(default_factory=dict)
    #: what upstream writes relative to its working directory (an A/B run gives each side its own)
    outputs: tuple = ()
    #: the target-only ``OtcaConfig`` flags this target takes (any other one given is refused)
    flags: tuple = ()
    smoke: Smoke = Smoke()
    extends: tuple = ()  # the skeletons it extends, nearest first

    def matches_script(self, script: str | os.PathLike) -> bool:
        """Whether a launched script path is this spec's upstream file (by its trailing path, as
        written or with its symlinks followed)."""
        want = tuple(self.file.split("/"))
        return any(Path(path).parts[-len(want):] == want for path in (os.path.abspath(script), os.path.realpath(script)))


#: the specs shipped inside the package (in a checkout, a link to the top-level ``patches/``)
PACKAGED_PATCHES_DIR = Path(__file__).resolve().parents[1] / "patches"


def default_patches_dir() -> Path:
    """``$OTCA_PATCHES_DIR`` or the specs shipped inside the package."""
    override = os.environ.get("OTCA_PATCHES_DIR")
    return Path(override) if override else PACKAGED_PATCHES_DIR


REQUIRED = ("name", "upstream", "file", "runtime", "verified_commit", "verified_sha256")
#: what only a target names (a skeleton that sets one would give it to every spec extending it)
PER_FILE = ("name", "file", "verified_commit", "verified_sha256")
_TARGET_KEYS = set(REQUIRED) | {"description", "outputs", "flags", "smoke"}
_SMOKE_KEYS = {"module", "objectives", "variants", "harness", "model", "sizes", "overrides", "processes", "launcher",
               "starts_wandb"}
LAUNCHERS = ("accelerate", "torchrun")
_TOP_KEYS = {"extends", "drop", "target", "hooks", "pins", "notes"}
_RUNTIME = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


def load_spec(path: str | os.PathLike) -> TargetSpec:
    """Parse and validate one spec file (with the skeletons it extends); errors name the file and
    the offending entry."""
    path = Path(path)
    data, chain = _resolved(path, ())
    target = data["target"]
    missing = [key for key in REQUIRED if not isinstance(target.get(key), str) or not target.get(key)]
    if missing:
        raise ValueError(f"hook spec {path}: [target] lacks {', '.join(missing)}")
    if not _RUNTIME.match(target["runtime"]):
        raise ValueError(f"hook spec {path}: [target] runtime must name the runtime class as \"module:Class\" "
                         f"(e.g. \"otca_patch.targets.dancegrpo:GrpoRuntime\"), got {target['runtime']!r}; "
                         f"docs/spec-format.md")
    hooks = tuple(_load_entry(entry.pop("_origin"), "hooks", position, entry)
                  for position, entry in enumerate(data["hooks"]))
    pins = tuple(_load_entry(entry.pop("_origin"), "pins", position, entry)
                 for position, entry in enumerate(data["pins"]))
    if not hooks:
        raise ValueError(f"hook spec {path}: no [[hooks]] entries")
    return TargetSpec(hooks=hooks, pins=pins, path=str(path), notes=data.get("notes", {}),
                      **{k: target[k] for k in REQUIRED}, description=target.get("description", ""),
                      outputs=_strings(path, "outputs", target.get("outputs", [])),
                      flags=_flags(path, target.get("flags", [])), smoke=_smoke(path, target.get("smoke", {}), target["file"]),
                      extends=tuple(str(p) for p in chain))


def _read(path: Path) -> dict:
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"hook spec {path}: cannot be read ({exc})") from None
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise ValueError(f"hook spec {path}: unknown top-level keys {sorted(unknown)} (known: {sorted(_TOP_KEYS)})")
    target = data.get("target", {})
    if not isinstance(target, dict) or ("target" not in data and "extends" not in data):
        raise ValueError(f"hook spec {path}: missing [target] table")
    unknown = set(target) - _TARGET_KEYS
    if unknown:
        raise ValueError(f"hook spec {path}: [target] has unknown keys {sorted(unknown)} (known: {sorted(_TARGET_KEYS)})")
    for table in ("hooks", "pins"):
        for position, entry in enumerate(data.get(table, [])):
            if not isinstance(entry.get("name"), str) or not entry.get("name"):
                raise ValueError(f"hook spec {path}: {table}[{position}] lacks a non-empty string 'name'")
            entry["_origin"] = path
    return data


def _resolved(path: Path, seen: tuple) -> tuple[dict, list]:
    """The spec's tables with every skeleton it extends merged in (theirs first, its own on top),
    and the skeletons' paths, nearest first."""
    if path.resolve() in seen:
        raise ValueError(f"hook spec {path}: `extends` loops ({' -> '.join(str(p) for p in seen + (path,))})")
    data = _read(path)
    skeleton = path.name.startswith(SKELETON_PREFIX)
    if skeleton:
        inherited = [key for key in PER_FILE if key in data.get("target", {})]
        if inherited:
            raise ValueError(f"hook spec {path}: a skeleton (a file named {SKELETON_PREFIX}*) sets no "
                             f"{', '.join(inherited)}: each spec extending it names its own")
    extends = data.get("extends")
    if extends is None:
        for key in ("drop",):
            if key in data:
                raise ValueError(f"hook spec {path}: `{key}` needs `extends` (it removes inherited entries)")
        for table in ("hooks", "pins"):
            for entry in data.get(table, []):
                if "before" in entry or "after" in entry:
                    raise ValueError(f"hook spec {path}: {table} entry {entry['name']}: `before`/`after` need "
                                     f"`extends` (they place an entry among inherited ones)")
        return {"target": data.get("target", {}), "notes": data.get("notes", {}),
                "hooks": data.get("hooks", []), "pins": data.get("pins", [])}, []
    if not isinstance(extends, str) or not extends.endswith(".toml"):
        raise ValueError(f"hook spec {path}: `extends` must name a skeleton file, e.g. \"dancegrpo/_flux_family.toml\", "
                         f"got {extends!r}")
    base_path = _find_skeleton(path, extends)
    base, chain = _resolved(base_path, seen + (path.resolve(),))
    return _merge(path, base, data), [base_path] + chain


def _find_skeleton(path: Path, extends: str) -> Path:
    """``extends`` is relative to the patches folder; it is looked up in the spec's own folder and
    each folder above it, nearest first (so a spec folder can be copied anywhere whole)."""
    for folder in Path(os.path.abspath(path)).parents:
        candidate = folder / extends
        if candidate.is_file():
            if not candidate.name.startswith(SKELETON_PREFIX):
                raise ValueError(f"hook spec {path}: extends {extends!r}, a target; only skeletons (files named "
                                 f"{SKELETON_PREFIX}*.toml) are extended")
            return candidate
    raise ValueError(f"hook spec {path}: extends {extends!r}, which is in neither its folder nor one above it")


def _merge(path: Path, base: dict, data: dict) -> dict:
    """``data`` (one spec file) on top of ``base`` (its skeleton, resolved). ``[target]`` and
    ``[notes]`` key by key (``[target.smoke]`` too, and its ``sizes`` and ``overrides`` tables); entries by name: the same name replaces the
    inherited entry in place, a new name is appended; ``before``/``after`` place it next to a named
    entry; ``drop`` lists inherited entries to remove."""
    target = {**base["target"], **data.get("target", {})}
    if "smoke" in base["target"] and "smoke" in data.get("target", {}):
        base_smoke, smoke = base["target"]["smoke"], data["target"]["smoke"]
        target["smoke"] = {**base_smoke, **smoke, **{key: {**base_smoke[key], **smoke[key]} for key in ("sizes", "overrides")
                                                   if isinstance(base_smoke.get(key), dict) and isinstance(smoke.get(key), dict)}}
    merged = {"target": target, "notes": {**base["notes"], **data.get("notes", {})},
              "hooks": list(base["hooks"]), "pins": list(base["pins"])}
    drop = data.get("drop", [])
    if not isinstance(drop, list) or not all(isinstance(name, str) for name in drop):
        raise ValueError(f"hook spec {path}: `drop` must list entry names, got {drop!r}")
    for name in drop:
        where = [table for table in ("hooks", "pins") if any(e["name"] == name for e in merged[table])]
        if not where:
            raise ValueError(f"hook spec {path}: drop {name!r}: no inherited hook or pin has that name")
        merged[where[0]] = [e for e in merged[where[0]] if e["name"] != name]
    for table in ("hooks", "pins"):
        entries = merged[table]
        for entry in data.get(table, []):
            entry = dict(entry)
            before, after = entry.pop("before", None), entry.pop("after", None)
            name = entry["name"]
            if name in drop:
                raise ValueError(f"hook spec {path}: {table} entry {name} is both dropped and given")
            if before is not None and after is not None:
                raise ValueError(f"hook spec {path}: {table} entry {name}: give `before` or `after`, not both")
            names = [e["name"] for e in entries]
            if before is None and after is None:
                if name in names:
                    entries[names.index(name)] = entry
                else:
                    entries.append(entry)
                continue
            if name in names:
                entries.pop(names.index(name))
                names.remove(name)
            anchor = before if before is not None else after
            if anchor not in names:
                raise ValueError(f"hook spec {path}: {table} entry {name}: {'before' if before is not None else 'after'}"
                                 f" = {anchor!r} names no {table[:-1]} ({', '.join(names)})")
            entries.insert(names.index(anchor) + (after is not None), entry)
    names = [e["name"] for e in merged["hooks"] + merged["pins"]]
    if len(set(names)) != len(names):
        raise ValueError(f"hook spec {path}: hook and pin names repeat: {names}")
    return merged


def _strings(path: Path, key: str, value) -> tuple:
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise ValueError(f"hook spec {path}: [target] {key} must be a list of non-empty strings, got {value!r}")
    return tuple(value)


def _flags(path: Path, value) -> tuple:
    """The target-only flags a spec declares: each a field of ``target_options.TargetOptions``."""
    names = _strings(path, "flags", value)
    known = target_only_flags()
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ValueError(f"hook spec {path}: [target] flags {', '.join(unknown)} are not target-only flags "
                         f"({', '.join(known)})")
    return names


def _smoke(path: Path, table, file: str) -> Smoke:
    if not isinstance(table, dict) or set(table) - _SMOKE_KEYS:
        raise ValueError(f"hook spec {path}: [target.smoke] takes {', '.join(sorted(_SMOKE_KEYS))}, got {table!r}")
    variants = table.get("variants", [])
    if not isinstance(variants, list) or not all(isinstance(v, dict) and set(v) == {"name", "module"}
                                                 and all(isinstance(x, str) and x for x in v.values())
                                                 for v in variants):
        raise ValueError(f"hook spec {path}: [target.smoke] variants must be a list of {{name, module}} tables, "
                         f"got {variants!r}")
    for key in ("module", "harness", "model"):
        if not isinstance(table.get(key, ""), str):
            raise ValueError(f"hook spec {path}: [target.smoke] {key} must be a name, got {table[key]!r}")
    if table.get("module") and table.get("harness"):
        raise ValueError(f"hook spec {path}: [target.smoke] gives module and harness; a smoke run has one of them")
    return Smoke(module=table.get("module", ""), harness=table.get("harness", ""), model=table.get("model", ""),
                 objectives=_strings(path, "smoke.objectives", table.get("objectives", ["upstream"])),
                 variants=tuple((v["name"], v["module"]) for v in variants), file=file,
                 **_smoke_facts(path, table))


def _smoke_facts(path: Path, table: dict) -> dict:
    """What a target adds for its family's harness, each checked for its type."""
    where = f"hook spec {path}: [target.smoke]"
    sizes, overrides = table.get("sizes", {}), table.get("overrides", {})
    if not isinstance(sizes, dict) or not all(isinstance(v, (int, float, str)) and not isinstance(v, bool)
                                              and k.isidentifier() for k, v in sizes.items()):
        raise ValueError(f"{where} sizes must map flag names to numbers or strings (0/1 for a switch: the "
                         f"smoke's flags take a value), got {sizes!r}")
    if not isinstance(overrides, dict):
        raise ValueError(f"{where} overrides must be a table of config keys, got {overrides!r}")
    processes, launcher = table.get("processes", 1), table.get("launcher", "accelerate")
    if not isinstance(processes, int) or isinstance(processes, bool) or processes < 1:
        raise ValueError(f"{where} processes must be a positive integer, got {processes!r}")
    if launcher not in LAUNCHERS:
        raise ValueError(f"{where} launcher must be one of {', '.join(LAUNCHERS)}, got {launcher!r}")
    starts_wandb = table.get("starts_wandb", True)
    if not isinstance(starts_wandb, bool):
        raise ValueError(f"{where} starts_wandb must be true or false, got {starts_wandb!r}")
    return {"sizes": sizes, "overrides": overrides, "processes": processes, "launcher": launcher,
            "starts_wandb": starts_wandb}


_HOOK_KEYS = {"name", "function", "anchor", "action", "code", "count", "within", "why", "reads"}
_PIN_KEYS = {"name", "function", "anchor", "count", "within", "why"}


def _load_entry(path: Path, table: str, position: int, entry: dict) -> Hook:
    """One ``[[hooks]]`` or ``[[pins]]`` entry, validated; errors name the file it is written in."""
    where = f"hook spec {path}: [[{table}]] {entry['name']}"
    pin = table == "pins"
    for key in ("function", "anchor") + (() if pin else ("action", "code")):
        if not isinstance(entry.get(key), str) or not entry.get(key):
            raise ValueError(f"{where} lacks a non-empty string {key!r}")
    label = where
    unknown = set(entry) - (_PIN_KEYS if pin else _HOOK_KEYS)
    if unknown:
        raise ValueError(f"{label}: unknown keys {sorted(unknown)}")
    count = entry.get("count", 1)
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise ValueError(f"{label}: count must be a positive integer, got {count!r}")
    if pin:
        return Hook(action=PIN, code="", origin=str(path), **entry)
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
    return Hook(**{**entry, "reads": tuple(reads)}, origin=str(path))


def names_read(code: str) -> set[str]:
    """Names ``code`` reads before binding them itself (statement by statement), except builtins and
    the layer's own names: the upstream names the code relies on."""
    read, bound = set(), set()
    for statement in ast.parse(code).body:
        names = [n for n in ast.walk(statement) if isinstance(n, ast.Name)]
        # a lambda's parameters and a comprehension's targets are the code's own names
        parameters = {n.arg for n in ast.walk(statement) if isinstance(n, ast.arg)} | {
            n.id for c in ast.walk(statement) if isinstance(c, ast.comprehension)
            for n in ast.walk(c.target) if isinstance(n, ast.Name)}
        read |= {n.id for n in names if isinstance(n.ctx, ast.Load)} - bound - parameters
        bound |= {n.id for n in names if not isinstance(n.ctx, ast.Load)}
    return read - LAYER_NAMES - set(dir(builtins))


def load_specs(directory: str | os.PathLike | None = None) -> list[TargetSpec]:
    """Every target spec (``*.toml`` not named ``_*``) under ``directory`` (default:
    ``default_patches_dir()``), sorted by path; two specs naming one target is an error."""
    directory = Path(directory) if directory is not None else default_patches_dir()
    if not directory.is_dir():
        raise ValueError(f"hook specs: directory {directory} does not exist (set OTCA_PATCHES_DIR)")
    specs = [load_spec(p) for p in sorted(directory.rglob("*.toml")) if not p.name.startswith(SKELETON_PREFIX)]
    seen = {}
    for spec in specs:
        if spec.name in seen:
            raise ValueError(f"hook specs: target {spec.name} is named by both {seen[spec.name]} and {spec.path}")
        seen[spec.name] = spec.path
    return specs


def probing_targets() -> tuple:
    """The targets whose spec lists the objective-timing probe's flag (``target_options.PROBE_FLAG``),
    among ``default_patches_dir()``'s specs: registering a probing target is its spec alone."""
    return tuple(spec.name for spec in load_specs() if PROBE_FLAG in spec.flags)
