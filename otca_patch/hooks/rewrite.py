"""Apply a ``TargetSpec`` to upstream source: parse, find every anchor (strict counts), splice in
the layer's code, and compile under the upstream file name so tracebacks point into upstream."""
from __future__ import annotations

import ast
import copy
import os
from dataclasses import dataclass

from . import pattern
from .errors import PatchError
from .spec import MODULE_SCOPE, PIN, Hook, TargetSpec

#: The name under which the rewritten code reaches the target's runtime object.
RUNTIME_NAME = "__otca__"
_MATCH_NAME = "__match__"


@dataclass(frozen=True)
class HookStatus:
    """What one hook found in one upstream source (for ``doctor`` and for errors)."""

    hook: Hook
    found: int
    problem: str  # "" when the hook holds
    tails: tuple = ()  # the no-op tails (``advantages.clone()``) its matches needed, as upstream spells them

    @property
    def ok(self) -> bool:
        return not self.problem


def rewrite(source: str, spec: TargetSpec, filename: str) -> ast.Module:
    """The upstream module's AST with every hook of ``spec`` applied, in spec order (``rewrite_tree``)."""
    return rewrite_tree(ast.parse(source, filename=filename), spec)


def rewrite_tree(tree: ast.Module, spec: TargetSpec) -> ast.Module:
    """``tree`` (the upstream module's, changed in place) with every hook of ``spec`` applied, in spec order.

    Every pin is checked on the upstream tree first; each hook's anchor is matched on the tree as
    rewritten by the hooks before it, and every name its code reads must be bound in its function.
    Raises ``PatchError`` naming the file, function and anchor on the first pin or hook that does not hold.
    """
    for pin in spec.pins:
        _, problem = _locate(tree, pin)
        if problem:
            raise _error(spec, pin, problem)
    for hook in spec.hooks:
        matches, problem = _locate(tree, hook)
        if problem:
            raise _error(spec, hook, problem)
        for match in reversed(matches):  # back to front keeps list indices valid
            _apply(hook, match)
    ast.fix_missing_locations(tree)
    return tree


def compile_target(source: str, spec: TargetSpec, filename: str):
    """Code object of the rewritten module, compiled under the upstream ``filename``."""
    return compile(rewrite(source, spec, filename), filename, "exec", dont_inherit=True)


def check(source: str, spec: TargetSpec, filename: str = "<upstream>") -> list[HookStatus]:
    """Every hook's status against ``source``, applying the holding ones as a real run would."""
    return check_tree(ast.parse(source, filename=filename), spec)


def check_tree(tree: ast.Module, spec: TargetSpec) -> list[HookStatus]:
    """``check`` on a parsed ``tree``, changed in place: when every status holds, it is the tree
    ``rewrite_tree`` returns."""
    statuses = []
    for pin in spec.pins:
        matches, problem = _locate(tree, pin)
        statuses.append(HookStatus(pin, len(matches), problem, _tails(matches)))
    for hook in spec.hooks:
        matches, problem = _locate(tree, hook)
        statuses.append(HookStatus(hook, len(matches), problem, _tails(matches)))
        if not problem:
            for match in reversed(matches):
                _apply(hook, match)
    return statuses


def holds(source: str, spec: TargetSpec, filename: str = "<upstream>") -> bool:
    """Whether every pin and hook of ``spec`` holds on ``source`` (``check``, stopping at the first
    that does not: what telling which spec, if any, fits a file needs)."""
    try:
        tree = ast.parse(source, filename=filename)
    except SyntaxError:
        return False
    for pin in spec.pins:
        if _locate(tree, pin)[1]:
            return False
    for hook in spec.hooks:
        matches, problem = _locate(tree, hook)
        if problem:
            return False
        for match in reversed(matches):
            _apply(hook, match)
    return True


def _tails(matches: list[pattern.Match]) -> tuple:
    return tuple(dict.fromkeys(ast.unparse(tail) for match in matches for tail in match.tails))


def _locate(tree: ast.Module, hook: Hook):
    """The hook's matches and a problem description ("" when exactly ``count`` were found)."""
    if hook.function == MODULE_SCOPE:
        scope = tree
    else:
        functions = list(pattern.iter_functions(tree, hook.function))
        if not functions:
            return [], f"function {hook.function!r} is not defined"
        if len(functions) > 1:
            return [], f"function {hook.function!r} is defined {len(functions)} times"
        scope = functions[0]
    anchor = pattern.parse_anchor(hook.anchor, statement=hook.action not in ("replace", PIN))
    if hook.within:
        regions = pattern.find(pattern.parse_anchor(hook.within), scope)
        if not regions:
            return [], f"no code matches the enclosing pattern `within = {hook.within}`"
        matches = []
        for region in regions:
            tails = pattern.skipped_tails(anchor, region.node)
            matches += ([] if tails is None else [region._replace(tails=tuple(tails))]) + pattern.find(anchor, region.node)
    else:
        matches = pattern.find(anchor, scope)
    if hook.function == MODULE_SCOPE:  # module scope means top-level statements only
        matches = [m for m in matches if m.parent is tree]
    if len(matches) != hook.count:
        found = "not found" if not matches else f"found {len(matches)} times"
        return matches, f"anchor {found}, expected exactly {hook.count}"
    return matches, _unbound_reads(tree, scope, hook)


def _unbound_reads(tree: ast.Module, scope: ast.AST, hook: Hook) -> str:
    """The problem when a name the hook's code reads is not bound where the code lands ("" if all are).

    A function hook's names must be bound in that function or a function enclosing it (module
    globals do not count: a renamed local must not resolve to some global of the same name)."""
    if not hook.reads:
        return ""
    if scope is tree:
        visible = pattern.bound_names(tree)
    else:
        visible = set().union(*(pattern.bound_names(f) for f in pattern.enclosing_functions(tree, scope) + [scope]))
    missing = [name for name in hook.reads if name not in visible]
    if not missing:
        return ""
    where = "at module level" if scope is tree else f"in function {hook.function!r}"
    return (f"the inserted code reads {', '.join(map(repr, missing))}, which upstream no longer binds {where} "
            f"(renamed or removed?)")


def _apply(hook: Hook, match: pattern.Match) -> None:
    node, parent, field, index = match.node, match.parent, match.field, match.index
    if isinstance(node, ast.expr):  # replaced in place; __match__ stands for the original
        replacement = _Substitute(node).visit(_CarryTails(match.tails).visit(_parse_expression(hook.code)))
        _locate_like(replacement, node)
        if index is None:
            setattr(parent, field, replacement)
        else:
            getattr(parent, field)[index] = replacement
        return
    statements = ast.parse(hook.code).body
    carry = _CarryTails(match.tails if hook.action == "replace" else ())
    for statement in statements:
        _Substitute(node).visit(carry.visit(statement))
        _locate_like(statement, node)
    siblings = getattr(parent, field)
    if hook.action == "insert_after":
        siblings[index + 1:index + 1] = statements
    elif hook.action == "insert_before":
        siblings[index:index] = statements
    else:
        siblings[index:index + 1] = statements


def _parse_expression(code: str) -> ast.expr:
    body = ast.parse(code.strip()).body
    if len(body) != 1 or not isinstance(body[0], ast.Expr):
        raise ValueError(f"replacement of an expression anchor must be one expression, got: {code!r}")
    return body[0].value


class _Substitute(ast.NodeTransformer):
    """Replaces the name ``__match__`` with a copy of the matched node."""

    def __init__(self, matched: ast.AST):
        self.matched = matched

    def visit_Name(self, node: ast.Name):
        return copy.deepcopy(self.matched) if node.id == _MATCH_NAME else node


class _CarryTails(ast.NodeTransformer):
    """In code that replaces upstream's, a value upstream gave no-op tails (``advantages.clone()`` in
    the replaced statement) gets the same tails where the code reads it: the layer receives a copy
    (or a detached tensor) exactly where upstream's own statement made one. A tail on a value the
    code does not read (nor passes on as ``__match__``) changes nothing the layer computes."""

    def __init__(self, tails):
        self.tailed = {}
        for tail in tails:
            receiver = tail
            while (receiver := pattern.tail_receiver(receiver)) is not None:
                self.tailed.setdefault(ast.unparse(receiver), tail)

    def visit(self, node):
        if (self.tailed and isinstance(node, ast.expr) and not isinstance(node, ast.Constant)
                and isinstance(getattr(node, "ctx", ast.Load()), ast.Load)):
            tail = self.tailed.get(ast.unparse(node))
            if tail is not None:
                return copy.deepcopy(tail)
        return super().visit(node) if self.tailed else node


def _locate_like(new: ast.AST, old: ast.AST) -> None:
    """New code reports the anchor's upstream line in tracebacks."""
    for child in ast.walk(new):
        if "lineno" in child._attributes:
            child.lineno, child.end_lineno = old.lineno, old.end_lineno
            child.col_offset, child.end_col_offset = old.col_offset, old.end_col_offset


def _error(spec: TargetSpec, hook: Hook, problem: str) -> PatchError:
    return PatchError(file=spec.file, function=hook.function, anchor=hook.anchor, problem=problem,
                      verified_commit=spec.verified_commit, hook=hook.name, spec=_where(spec, hook),
                      kind="pin" if hook.is_pin else "hook")


def _where(spec: TargetSpec, hook: Hook) -> str:
    """The spec, and the skeleton the entry is written in when it is inherited."""
    if hook.origin and os.path.abspath(hook.origin) != os.path.abspath(spec.path):
        return f"{spec.path}, entry written in {hook.origin}"
    return spec.path
