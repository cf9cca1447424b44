"""Structural AST patterns: an anchor is Python source in which ``...`` stands for "anything".

``decoded_image[0].save(...)`` matches that call with any arguments; ``for key in [...]: ...``
matches the loop with any list and body. Names, attributes and constants must be equal; formatting,
comments and line numbers never matter, so a reformatted upstream file still matches.

No-op tails: inside an anchor, a value upstream follows with ``.detach()``, ``.clone()`` or
``.contiguous()`` (no arguments, any number of them) still matches the pattern without them:
``samples["a"] = advantages`` matches ``samples["a"] = advantages.clone()``. Each such call returns
the same values (a copy, the tensor without autograd history, or in contiguous memory), so what the
anchor establishes still holds; a match reports the tails it skipped. The anchor's own top node is
never stripped: ``x[:, j]`` inside ``x[:, j].clone()`` is found as the inner node, so a replacement
lands inside the tail and upstream's tail applies to the layer's value as it applied to upstream's.
"""
from __future__ import annotations

import ast
from typing import Iterator, NamedTuple, Union

_IGNORED_FIELDS = {"ctx", "type_comment", "kind"}
Node = Union[ast.AST, list, str, int, float, None]
#: methods that return their receiver's values unchanged when called without arguments
NO_OP_TAILS = frozenset({"detach", "clone", "contiguous"})


class Match(NamedTuple):
    """One node matching an anchor: where it sits (``index`` in the parent's list field, or None for
    a single-node field) and the outermost call of each no-op tail chain the match skipped."""

    node: ast.AST
    parent: ast.AST
    field: str
    index: int | None
    tails: tuple = ()


def parse_anchor(source: str, statement: bool = False) -> ast.AST:
    """One statement or expression; a bare expression is returned as an expression unless
    ``statement`` asks for the statement that consists of it (for insertions around it)."""
    if source.startswith("def ") and source[4:].strip().isidentifier():
        return _DefName(source[4:].strip())
    module = ast.parse(source.strip())
    if len(module.body) != 1:
        raise ValueError(f"anchor must be exactly one statement or expression, got {len(module.body)}: {source!r}")
    stmt = module.body[0]
    return stmt.value if isinstance(stmt, ast.Expr) and not statement else stmt


class _DefName(ast.AST):
    """``def NAME``: a function definition with that name, whatever its signature and body."""

    _fields = ()

    def __init__(self, name: str):
        super().__init__()
        self.name = name


def _is_wildcard(node: Node) -> bool:
    if isinstance(node, ast.Expr):
        node = node.value
    return isinstance(node, ast.Constant) and node.value is Ellipsis


def _is_any_arguments(call: ast.Call) -> bool:
    return len(call.args) == 1 and _is_wildcard(call.args[0]) and not call.keywords


def tail_receiver(node: Node) -> ast.expr | None:
    """``X`` when ``node`` is ``X.detach()``, ``X.clone()`` or ``X.contiguous()`` (no arguments), else None."""
    if (isinstance(node, ast.Call) and not node.args and not node.keywords and isinstance(node.func, ast.Attribute)
            and node.func.attr in NO_OP_TAILS):
        return node.func.value
    return None


def matches(pattern: Node, node: Node) -> bool:
    """Whether ``node`` has the shape of ``pattern`` (``...`` matches any node or any list; inner
    values may carry no-op tails)."""
    return skipped_tails(pattern, node) is not None


def skipped_tails(pattern: Node, node: Node, nested: bool = False) -> list | None:
    """None when ``node`` does not have the shape of ``pattern``; else the no-op tail calls the match
    skipped (outermost call of each chain; ``[]`` for an exact match). ``nested``: ``node`` is inside
    the matched node, where a value may carry tails the pattern does not spell."""
    if isinstance(pattern, _DefName):
        return [] if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == pattern.name else None
    if _is_wildcard(pattern):
        return [] if node is not None and not isinstance(node, list) else None
    if isinstance(pattern, list):
        if len(pattern) == 1 and _is_wildcard(pattern[0]):
            return [] if isinstance(node, list) else None
        if not isinstance(node, list) or len(pattern) != len(node):
            return None
        return _all_fields(zip(pattern, node))
    if isinstance(pattern, ast.AST):
        receiver = node if nested else None  # the whole chain first: the tails reported are upstream's outermost
        while (receiver := tail_receiver(receiver)) is not None:
            inner = _same_node(pattern, receiver)
            if inner is not None:
                return [node] + inner
        return _same_node(pattern, node)
    return [] if pattern == node else None


def _same_node(pattern: ast.AST, node: Node) -> list | None:
    """``skipped_tails`` for a node of the pattern's own type, field by field."""
    if type(pattern) is not type(node):
        return None
    if isinstance(pattern, ast.Call) and _is_any_arguments(pattern):  # f(...): any args and keywords
        return skipped_tails(pattern.func, node.func, nested=True)
    return _all_fields((getattr(pattern, f, None), getattr(node, f, None))
                       for f in pattern._fields if f not in _IGNORED_FIELDS)


def _all_fields(pairs) -> list | None:
    tails = []
    for pattern, node in pairs:
        found = skipped_tails(pattern, node, nested=True)
        if found is None:
            return None
        tails += found
    return tails


def find(pattern: ast.AST, scope: ast.AST) -> list[Match]:
    """Every node under ``scope`` matching ``pattern``, in walk order.

    Nested functions are searched too; the scope node itself is not a match. Where a match is a
    no-op tail over another match (``x.detach()`` anchored, ``x.detach().detach()`` found), only the
    inner one counts: the outer call stays upstream's tail.
    """
    found = []
    for parent in ast.walk(scope):
        for field, value in ast.iter_fields(parent):
            children = value if isinstance(value, list) else [value]
            for position, child in enumerate(children):
                if isinstance(child, ast.AST):
                    tails = skipped_tails(pattern, child)
                    if tails is not None:
                        found.append(Match(child, parent, field, position if isinstance(value, list) else None,
                                           tuple(tails)))
    nodes = {id(m.node) for m in found}
    return [m for m in found if not _over_another(m.node, nodes)]


def _over_another(node: ast.AST, nodes: set) -> bool:
    while (node := tail_receiver(node)) is not None:
        if id(node) in nodes:
            return True
    return False


def iter_functions(module: ast.Module, name: str) -> Iterator[ast.AST]:
    """Top-level or nested function definitions called ``name``."""
    for node in ast.walk(module):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            yield node


_NEW_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.ListComp, ast.SetComp,
               ast.DictComp, ast.GeneratorExp)


def bound_names(scope: ast.AST) -> set[str]:
    """Names ``scope`` (a function or the module) binds itself: parameters, assignment, loop, ``with``
    and ``except`` targets, imports, nested ``def``/``class`` names. Bodies of nested scopes are not
    searched (their names are not visible here)."""
    names: set[str] = set()
    if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        arguments = scope.args
        for arg in arguments.posonlyargs + arguments.args + arguments.kwonlyargs + [arguments.vararg, arguments.kwarg]:
            if arg is not None:
                names.add(arg.arg)
    pending = list(ast.iter_child_nodes(scope))
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            pending.extend(node.decorator_list)
            continue
        if isinstance(node, _NEW_SCOPES):
            continue
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            names.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names if alias.name != "*")
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        pending.extend(ast.iter_child_nodes(node))
    return names


def enclosing_functions(module: ast.Module, target: ast.AST) -> list[ast.AST]:
    """The functions that contain ``target`` (outermost first), ``target`` excluded."""
    chain: list[ast.AST] = []

    def visit(node: ast.AST, outer: list) -> bool:
        for child in ast.iter_child_nodes(node):
            if child is target:
                chain.extend(outer)
                return True
            inner = outer + [child] if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else outer
            if visit(child, inner):
                return True
        return False

    visit(module, [])
    return chain
