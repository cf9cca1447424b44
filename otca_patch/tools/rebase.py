"""``otca-patch rebase REF [LOCAL_CLONE]``: try upstream's commit REF against the layer.
``otca-patch rebase --from DIR``: the same checks on an unpacked release (a tree without git).

In a plain upstream clone (a DanceGRPO or FlowGRPO checkout, where a user who pip-installed
otca-patch works): checks REF out, checks every target's hook points on it (``otca-patch doctor``),
runs the smoke of every target whose file differs from the one the layer was verified on (and
whose hooks hold), checks the commit you were on out again, and reports per target, naming the
targets that have no file at REF. Nothing is committed or pinned; local changes stop it first.

In a clone of this repository (upstream/* are submodules): fetches REF from LOCAL_CLONE into the
submodule, runs the same checks and, when every target holds, stages the new commit as the
submodule's pinned commit (``git add`` of the gitlink; committing stays with you). Otherwise the pin
is left alone and the submodule goes back to the commit it was on (--stay keeps the new one checked
out, to write the new specs against it). The submodule is upstream/DanceGRPO, or the one whose name
or URL matches LOCAL_CLONE, or --submodule.

An unpacked release (no .git) has no commits to move between: --from DIR checks that tree as it is
(hook points, and the smoke of every target whose file changed) and reports the same way.

The smoke of a target is ``python -m otca_patch.smoke UPSTREAM OUT --target NAME --steps 1 --otca``;
--smoke CMD (or $OTCA_REBASE_SMOKE) replaces it, run by bash once per target with $UPSTREAM_DIR,
$SMOKE_OUT and $OTCA_TARGET set; "skip" skips it.
Exit status: 0 every target at REF holds (moved, for a submodule), 1 some target fails, 2 usage or git error.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

from ..files import shown_path
from ..help_text import PlainDescriptionFormatter
from ..hooks.coverage import uncovered_summary
from ..hooks.spec import load_specs
from .target_check import check_targets, format_checks, smoke_changed, upstream_specs, wrapped

DEFAULT_SUBMODULE = "upstream/DanceGRPO"
SMOKE_ENV = "OTCA_REBASE_SMOKE"
FETCHED = "refs/otca-rebase"  # where the clone's branches land inside the submodule


class RebaseError(RuntimeError):
    pass


def git(*args: str, cwd: Path, check: bool = True) -> str:
    done = subprocess.run(["git", "-c", "protocol.file.allow=always", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=600)
    if check and done.returncode != 0:
        raise RebaseError(f"git {' '.join(args)} (in {cwd}) failed: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout.strip()


def submodules(superproject: Path) -> dict[str, str]:
    """path -> url of every submodule in ``.gitmodules``."""
    if not (superproject / ".gitmodules").is_file():
        return {}
    listing = git("config", "-f", ".gitmodules", "--get-regexp", r"^submodule\..*\.(path|url)$", cwd=superproject,
                  check=False)
    entries: dict[str, dict] = {}
    for line in listing.splitlines():
        key, _, value = line.partition(" ")
        name, kind = key[len("submodule."):].rsplit(".", 1)
        entries.setdefault(name, {})[kind] = value
    return {e["path"]: e.get("url", "") for e in entries.values() if "path" in e}


def _base(name: str) -> str:
    return re.sub(r"\.git$", "", name.rstrip("/").rsplit("/", 1)[-1]).lower()


def pick_submodule(superproject: Path, clone: Path | None, explicit: str | None) -> str:
    known = submodules(superproject)
    if explicit:
        if explicit not in known:
            raise RebaseError(f"{explicit} is not a submodule of {superproject} (submodules: {', '.join(known) or 'none'})")
        return explicit
    if clone is not None:
        matches = [path for path, url in known.items() if _base(clone.resolve().name) in (_base(path), _base(url))]
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            raise RebaseError(f"{clone} matches several submodules ({', '.join(matches)}); pass --submodule")
    if DEFAULT_SUBMODULE in known:
        return DEFAULT_SUBMODULE
    raise RebaseError(f"no submodule to move: {clone or DEFAULT_SUBMODULE} matches none of "
                      f"{', '.join(known) or 'no submodules'}; pass --submodule")


def pinned_commit(superproject: Path, path: str) -> str:
    """The gitlink in the superproject's index: the commit the submodule is pinned to."""
    entry = git("ls-files", "--stage", "--", path, cwd=superproject)
    if not entry.startswith("160000 "):
        raise RebaseError(f"{path} has no gitlink in {superproject}'s index; is it a submodule?")
    return entry.split()[1]


def resolve_ref(submodule: Path, ref: str, clone: Path | None) -> str:
    if clone is not None:
        git("fetch", "--quiet", "--tags", str(clone.resolve()), f"+refs/heads/*:{FETCHED}/*", cwd=submodule)
    for candidate in (ref, f"{FETCHED}/{ref}"):
        commit = git("rev-parse", "--verify", "--quiet", f"{candidate}^{{commit}}", cwd=submodule, check=False)
        if commit:
            return commit
    raise RebaseError(f"{ref} is not a commit, branch or tag of {clone or submodule}")


def summary_lines(checks: list) -> list[str]:
    """The hook points that still hold, by name (per target with a count when there are many)."""
    held = [f"{c.name}:{h}" for c in checks if c.present for h in c.held]
    if len(held) <= 12:
        return [wrapped("still hold", held)]
    per_target = [f"{c.name} {c.hold}" for c in checks if c.present and c.hold]
    return [wrapped("still hold", per_target).replace(f"({len(per_target)})", f"({len(held)} hook points)", 1)]


def check_at(checkout: Path, ref: str, specs: list, smoke: str | None) -> tuple[bool, str]:
    """(every present target holds and smokes, the per-target report) at the current checkout."""
    checks = check_targets(checkout, specs)
    failures = smoke_changed(checks, checkout, smoke)
    report = "\n".join([*summary_lines(checks), format_checks(checks, ref), *failures,
                        *uncovered_summary(checkout, specs)])
    present = [c for c in checks if c.present]
    if not present:
        raise RebaseError(f"{ref} holds none of the targets' files ({', '.join(c.file for c in checks)})")
    return all(not c.broken for c in present) and not failures, report


def rebase(superproject: Path, ref: str, clone: Path | None, submodule_path: str | None, smoke: str | None,
           stay: bool) -> int:
    path = pick_submodule(superproject, clone, submodule_path)
    submodule = superproject / path
    if not (submodule / ".git").exists():
        raise RebaseError(f"{submodule} is not checked out (git submodule update --init {path})")
    pinned = pinned_commit(superproject, path)
    before = git("rev-parse", "HEAD", cwd=submodule)
    target = resolve_ref(submodule, ref, clone)
    print(f"rebase: {path}: pinned {pinned[:12]}, checked out {before[:12]} -> {ref} = {target[:12]}")
    local = git("status", "--porcelain", "--untracked-files=no", cwd=submodule)
    if local:
        print(f"rebase: note: {path} has local changes that travel with the checkout:\n{local}")
    specs = upstream_specs(submodule, load_specs())
    git("checkout", "--quiet", "--detach", target, cwd=submodule)
    moved = False
    try:
        fits, report = check_at(submodule, ref, specs, smoke)
        print(report)
        if not fits:
            print(f"rebase: pinned commit left at {pinned[:12]}: update the specs under patches/ for {ref} "
                  f"(or the failing smoke), then run this again")
            return 1
        git("add", "--", path, cwd=superproject)
        moved = True
        print(f"rebase: {path} pinned to {target[:12]} in the index (staged, not committed); the specs still "
              f"name their old verified_commit/verified_sha256: update them with the new commit")
        return 0
    finally:
        if not moved and not stay:
            git("checkout", "--quiet", "--detach", before, cwd=submodule)
            print(f"rebase: {path} checked out at {before[:12]} again (--stay keeps {target[:12]})")


def is_upstream_clone(repository: Path) -> bool:
    """Whether the repository itself is an upstream checkout (holds some target's file)."""
    return any((repository / spec.file).is_file() for spec in load_specs())


def rebase_clone(repository: Path, ref: str, smoke: str | None, stay: bool) -> int:
    """Plain-clone mode: check REF out, check and smoke it per target, check the old commit out again."""
    local = git("status", "--porcelain", "--untracked-files=no", cwd=repository)
    if local:
        raise RebaseError(f"{repository} has local changes to tracked files; commit or stash them first "
                          f"(nothing was changed):\n{local}")
    branch = git("symbolic-ref", "--quiet", "--short", "HEAD", cwd=repository, check=False)
    before = git("rev-parse", "HEAD", cwd=repository)
    target = resolve_ref(repository, ref, None)
    print(f"rebase: {repository}: on {branch or before[:12]} -> {ref} = {target[:12]}")
    specs = upstream_specs(repository, load_specs())
    git("checkout", "--quiet", "--detach", target, cwd=repository)
    try:
        fits, report = check_at(repository, ref, specs, smoke)
        print(report)
        print(verdict_line(ref, fits))
        return 0 if fits else 1
    finally:
        if not stay:
            git("checkout", "--quiet", branch or before, cwd=repository)
            print(f"rebase: checked out {branch or before[:12]} again (--stay keeps {target[:12]})")


def verdict_line(ref: str, fits: bool) -> str:
    return f"rebase: {ref} " + ("fits: every target it has holds" if fits else
                                "does not fit: the targets above that fail need new specs (or a fix)")


def rebase_tree(tree: Path, smoke: str | None) -> int:
    """``--from DIR``: an unpacked release checked as it is; nothing is checked out or changed."""
    if not tree.is_dir():
        raise RebaseError(f"--from {tree}: no such folder")
    name = tree.resolve().name
    print(f"rebase: {shown_path(tree)}: the tree as it is (--from: nothing is checked out)")
    fits, report = check_at(tree, name, upstream_specs(tree, load_specs()), smoke)
    print(report)
    print(verdict_line(name, fits))
    return 0 if fits else 1


def not_a_repository(start: Path) -> str:
    """What to do where there is no git repository (an unpacked release)."""
    shown = shown_path(start)
    return (f"{shown} is not in a git repository (an unpacked release?), so there is no REF to check out: "
            f"`otca-patch rebase --from {shown}` checks this tree as it is; REF needs a git clone of upstream")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="otca-patch rebase", description=__doc__,
                                     formatter_class=PlainDescriptionFormatter)
    parser.add_argument("ref", nargs="?", help="upstream commit, branch or tag")
    parser.add_argument("clone", nargs="?", type=Path, help="local clone of the upstream repository to fetch REF from")
    parser.add_argument("--submodule", help=f"submodule path (default: matched to LOCAL_CLONE, else {DEFAULT_SUBMODULE})")
    parser.add_argument("--smoke", default=os.environ.get(SMOKE_ENV), help="smoke command, or 'skip'")
    parser.add_argument("--stay", action="store_true", help="keep the new commit checked out when it is not pinned")
    parser.add_argument("--superproject", type=Path, help="default: the git repository of the current directory")
    parser.add_argument("--from", dest="tree", type=Path, metavar="DIR",
                        help="check an unpacked release (no git) as it is, instead of a commit REF")
    args = parser.parse_args(argv)
    if (args.ref is None) == (args.tree is None):
        parser.error("give REF (a commit of this clone) or --from DIR (an unpacked release), one of them")
    try:
        if args.tree is not None:
            return rebase_tree(args.tree, args.smoke)
        start = args.superproject or Path.cwd()
        if git("rev-parse", "--is-inside-work-tree", cwd=start, check=False) != "true":
            raise RebaseError(not_a_repository(start))
        superproject = Path(git("rev-parse", "--show-toplevel", cwd=start))
        if args.clone is not None and not args.clone.is_dir():
            raise RebaseError(f"local clone {args.clone} does not exist")
        if args.submodule is None and args.clone is None and is_upstream_clone(superproject):
            return rebase_clone(superproject, args.ref, args.smoke, args.stay)
        return rebase(superproject, args.ref, args.clone, args.submodule, args.smoke, args.stay)
    except (RebaseError, ValueError) as exc:
        print(f"otca-patch rebase: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
