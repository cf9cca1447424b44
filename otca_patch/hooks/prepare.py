"""A targeted upstream file made ready to run, from one read and one parse of it: the spec that
applies (named by ``--otca_target``, else picked by the file's path and content), the rewritten code,
and the line on the file's identity when it is not the file the spec was verified on."""
from __future__ import annotations

import ast
import os
from dataclasses import dataclass
from types import CodeType
from typing import Mapping, Sequence

from .doctor import identity_line
from .explicit_targets import spec_choice_for
from .rewrite import check_tree, rewrite_tree
from .source import upstream_file
from .spec import TargetSpec


@dataclass(frozen=True)
class Prepared:
    """What a process needs from the hook engine to run a targeted file."""

    spec: TargetSpec
    reason: str  # why this spec (``select.SpecChoice.reason``)
    code: CodeType
    identity: str  # doctor's line on a file that is not the verified one; "" for the verified file


def rewritten(path: str | os.PathLike, spec: TargetSpec) -> tuple[CodeType, str]:
    """The rewritten file's code object (compiled under its absolute path) and its identity line
    (``Prepared.identity``); raises ``PatchError`` when a pin, hook point or name read does not hold."""
    file = upstream_file(path)
    tree = file.tree()
    statuses = check_tree(tree, spec)  # when all hold, ``tree`` is the rewritten one
    if not all(status.ok for status in statuses):
        rewrite_tree(file.tree(), spec)  # raises the PatchError naming the first that does not hold
    code = compile(ast.fix_missing_locations(tree), file.path, "exec", dont_inherit=True)
    if file.sha256 == spec.verified_sha256:
        return code, ""
    return code, identity_line(spec, file.sha256, tails={status.hook.name: status.tails for status in statuses})


def prepare(script: str | os.PathLike, chosen: Mapping[str, str], specs: Sequence[TargetSpec]) -> Prepared | None:
    """``script`` ready to run (``chosen``: ``--otca_target``'s ``{PATH: NAME}``), or ``None`` when no spec
    targets it; raises (``PatchError``, ``SpecChoiceError``, ...) before any upstream code runs."""
    choice = spec_choice_for(script, chosen, specs)
    if choice is None:
        return None
    code, identity = rewritten(script, choice.spec)
    return Prepared(choice.spec, choice.reason, code, identity)
