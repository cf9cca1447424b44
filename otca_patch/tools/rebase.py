"""``otca-patch rebase REF [LOCAL_CLONE]`` (``scripts/rebase_upstream.sh`` in a checkout of otca-patch): try an upstream submodule on another commit.

Fetches REF from LOCAL_CLONE (a local clone of the upstream repository) into the submodule,
checks it out, checks every hook-point spec on it (``otca-patch doctor``) and, when all hold, runs
the smoke command on it. Only when both pass is the new commit staged as the submodule's pinned
commit (``git add`` of the gitlink; committing stays with you). Otherwise the pin is left alone and
the submodule goes back to the commit it was on (--stay keeps the new one checked out, to write the
new specs against it).

The submodule is upstream/DanceGRPO, or the one whose name or URL matches LOCAL_CLONE, or --submodule.
The smoke command is ``python -m otca_patch.smoke UPSTREAM OUT --steps 1 --otca``; --smoke CMD
(or $OTCA_REBASE_SMOKE) replaces it, run by bash with $UPSTREAM_DIR and $SMOKE_OUT set; "skip" skips it.
Exit status: 0 moved, 1 left alone (hooks or smoke fail), 2 usage or git error.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from ..hooks.doctor import diagnose, format_report, verdicts
from ..hooks.spec import load_specs

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


def run_smoke(command: str | None, upstream: Path) -> tuple[bool | None, str]:
    """(passed, what ran); passed is None when skipped."""
    if command == "skip":
        return None, "skipped (--smoke skip)"
    with tempfile.TemporaryDirectory(prefix="otca-rebase-smoke-") as out:
        if command is None:
            argv = [sys.executable, "-m", "otca_patch.smoke", str(upstream), out, "--steps", "1", "--otca"]
        else:
            argv = ["bash", "-c", command]
        env = dict(os.environ, UPSTREAM_DIR=str(upstream), SMOKE_OUT=out)
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=3600)
    shown = command or " ".join(argv)
    if done.returncode != 0:
        return False, f"{shown}: exit {done.returncode}\n{(done.stdout + done.stderr)[-3000:]}"
    return True, shown


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
    git("checkout", "--quiet", "--detach", target, cwd=submodule)
    moved = False
    try:
        rows, all_hold = diagnose(submodule, load_specs())
        print(format_report(submodule, rows))
        hold = [f"{r['target']}:{r['hook']}" for r in rows if r["status"] == "ok"]
        broken = [f"{r['target']}:{r['hook']} ({r['status'][len('FAIL: '):]})" for r in rows if r["status"] != "ok"]
        print(f"still hold ({len(hold)}): {', '.join(hold) or 'none'}")
        print(f"need a new spec ({len(broken)}): {', '.join(broken) or 'none'}")
        print("\n".join(verdicts(rows)))
        if not all_hold:
            print(f"rebase: pinned commit left at {pinned[:12]}: update the specs under patches/ for {ref}, "
                  f"then run this again")
            return 1
        passed, shown = run_smoke(smoke, submodule)
        print(f"smoke: {'passed' if passed else 'FAILED' if passed is False else ''} {shown}".replace("  ", " "))
        if passed is False:
            print(f"rebase: pinned commit left at {pinned[:12]}: the hook points hold but the smoke run fails")
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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="otca-patch rebase", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("ref", help="upstream commit, branch or tag")
    parser.add_argument("clone", nargs="?", type=Path, help="local clone of the upstream repository to fetch REF from")
    parser.add_argument("--submodule", help=f"submodule path (default: matched to LOCAL_CLONE, else {DEFAULT_SUBMODULE})")
    parser.add_argument("--smoke", default=os.environ.get(SMOKE_ENV), help="smoke command, or 'skip'")
    parser.add_argument("--stay", action="store_true", help="keep the new commit checked out when it is not pinned")
    parser.add_argument("--superproject", type=Path, help="default: the git repository of the current directory")
    args = parser.parse_args(argv)
    try:
        start = args.superproject or Path.cwd()
        superproject = Path(git("rev-parse", "--show-toplevel", cwd=start))
        if args.clone is not None and not args.clone.is_dir():
            raise RebaseError(f"local clone {args.clone} does not exist")
        return rebase(superproject, args.ref, args.clone, args.submodule, args.smoke, args.stay)
    except (RebaseError, ValueError) as exc:
        print(f"otca-patch rebase: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
