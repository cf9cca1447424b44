"""Structural AST patterns: an anchor is Python source in which ``...`` stands for "anything".

``decoded_image[0].save(...)`` matches that call with any arguments; ``for key in [...]: ...``
matches the loop with any list and body. Names, attributes and constants must be equal; formatting,
comments and line numbers never matter, so a reformatted upstream file still matches.
"""
from __future__ import annotations

import ast
from typing import Iterator, Union

_IGNORED_FIELDS = {"ctx", "type_comment", "kind"}
Node = Union[ast.AST, list, str, int, float, None]


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


def matches(pattern: Node, node: Node) -> bool:
    """Whether ``node`` has the shape of ``pattern`` (``...`` matches any node or any list)."""
    if isinstance(pattern, _DefName):
        return isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == pattern.name
    if _is_wildcard(pattern):
        return node is not None and not isinstance(node, list)
    if isinstance(pattern, list):
        if len(pattern) == 1 and _is_wildcard(pattern[0]):
            return isinstance(node, list)
        return isinstance(node, list) and len(pattern) == len(node) and all(map(matches, pattern, node))
    if isinstance(pattern, ast.AST):
        if type(pattern) is not type(node):
            return False
        if isinstance(pattern, ast.Call) and _is_any_arguments(pattern):  # f(...): any args and keywords
            return matches(pattern.func, node.func)
        return all(matches(getattr(pattern, f, None), getattr(node, f, None))
                   for f in pattern._fields if f not in _IGNORED_FIELDS)
    return pattern == node


def find(pattern: ast.AST, scope: ast.AST) -> list[tuple[ast.AST, ast.AST, str, int | None]]:
    """Every node under ``scope`` matching ``pattern``, as ``(node, parent, field, index)``.

    ``index`` is the position in the parent's list field, or ``None`` for a single-node field.
    Nested functions are searched too; the scope node itself is not a match.
    """
    found = []
    for parent in ast.walk(scope):
        for field, value in ast.iter_fields(parent):
            children = value if isinstance(value, list) else [value]
            for position, child in enumerate(children):
                if isinstance(child, ast.AST) and matches(pattern, child):
                    found.append((child, parent, field, position if isinstance(value, list) else None))
    return found


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
