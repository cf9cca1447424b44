"""The one error a hook point raises when upstream no longer looks the way its spec says."""
from __future__ import annotations


class PatchError(RuntimeError):
    """A hook point of a spec no longer holds: an anchor is missing or matches the wrong number of
    times, a name the inserted code reads is no longer bound, a pin (a fact about upstream the
    inserted code relies on) no longer matches, or a run-time invariant fails.

    A run that asked for ``--otca`` stops with this before training: it never trains vanilla silently.
    """

    def __init__(self, *, file: str, function: str, anchor: str, problem: str, verified_commit: str,
                 hook: str = "", spec: str = "", kind: str = "hook"):
        self.file, self.function, self.anchor, self.problem = file, function, anchor, problem
        self.verified_commit, self.hook, self.spec, self.kind = verified_commit, hook, spec, kind
        # no "otca-patch" here: the command that reports the error puts its own prefix in front
        head = (f"cannot install hook {hook!r} into upstream file {file}, function {function}: "
                if kind == "hook" else
                f"{kind} {hook!r} of upstream file {file}, function {function}, does not hold: ")
        super().__init__(
            head + f"{problem}.\n  anchor: {anchor}\n  spec: {spec} (written against upstream commit {verified_commit})\n"
            f"  Run `otca-patch doctor <upstream checkout>` to see every hook point; a new upstream release "
            f"needs a new spec (`otca-patch rebase`)."
        )
