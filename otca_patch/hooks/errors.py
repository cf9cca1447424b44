"""The one error a hook point raises when upstream no longer looks the way its spec says."""
from __future__ import annotations


class PatchError(RuntimeError):
    """An anchor of a hook-point spec is missing or matches the wrong number of times.

    A run that asked for ``--otca`` stops with this before training: it never trains vanilla silently.
    """

    def __init__(self, *, file: str, function: str, anchor: str, problem: str, verified_commit: str,
                 hook: str = "", spec: str = ""):
        self.file, self.function, self.anchor, self.problem = file, function, anchor, problem
        self.verified_commit, self.hook, self.spec = verified_commit, hook, spec
        super().__init__(
            f"otca-patch cannot install hook {hook!r} into upstream file {file}, function {function}: "
            f"{problem}.\n  anchor: {anchor}\n  spec: {spec} (written against upstream commit {verified_commit})\n"
            f"  Run `otca-patch doctor <upstream checkout>` to see every hook point; a new upstream release "
            f"needs a new spec (scripts/rebase_upstream.sh)."
        )
