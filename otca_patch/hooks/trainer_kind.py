"""Whether an upstream trainer file is a GRPO trainer, told from its structure (``doctor`` on files
no spec covers).

OTCA replaces a GRPO trainer's group advantage, the factor of its policy-gradient loss. The rule:

- **GRPO**: the file multiplies an advantage by a likelihood ratio: a product whose one operand is
  a name containing ``advantage`` (``advantages``, ``vq_advantages``, ``sample["advantages"]``)
  and whose other is, or clamps, a name containing ``ratio`` (``-advantages * ratio``,
  ``-advantages * torch.clamp(ratio, ...)``). Every GRPO trainer of DanceGRPO, FlowGRPO and MixGRPO has it.
- **not GRPO**: no such product, and the file calls ``backward`` itself: it trains a loss of its
  own without that factor (FlowGRPO's DPO, a preference loss over best/worst pairs; its SFT, a
  flow-matching loss on the best samples; NFT). Such files may rank samples by a group-normalised
  reward (DPO and SFT do), but there is no per-step advantage in the loss to replace.
- **unknown**: neither (the loss is computed outside the file, e.g. FlowGRPO's Bagel in its
  model code): doctor says nothing about its kind.
"""
from __future__ import annotations

import ast
from pathlib import Path

GRPO, NOT_GRPO, UNKNOWN = "grpo", "not_grpo", "unknown"


def _names(node: ast.AST) -> list[str]:
    """The identifiers in ``node``: names, attributes and string subscript keys."""
    found = []
    for inner in ast.walk(node):
        if isinstance(inner, ast.Name):
            found.append(inner.id)
        elif isinstance(inner, ast.Attribute):
            found.append(inner.attr)
        elif isinstance(inner, ast.Constant) and isinstance(inner.value, str):
            found.append(inner.value)
    return found


def _is_advantage(node: ast.AST) -> bool:
    while isinstance(node, ast.UnaryOp):
        node = node.operand
    return isinstance(node, (ast.Name, ast.Subscript, ast.Attribute)) and any(
        "advantage" in name.lower() for name in _names(node))


def _is_ratio(node: ast.AST) -> bool:
    if isinstance(node, ast.Call):  # torch.clamp(ratio, ...): its first argument
        return bool(node.args) and _is_ratio(node.args[0])
    return isinstance(node, ast.Name) and "ratio" in node.id.lower()


def trainer_kind(path: Path) -> str:
    """``GRPO``, ``NOT_GRPO`` or ``UNKNOWN`` for the Python file at ``path`` (the rule above)."""
    try:
        tree = ast.parse(Path(path).read_text(errors="replace"))
    except SyntaxError:
        return UNKNOWN
    backward = False
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            if (_is_advantage(node.left) and _is_ratio(node.right)) or (_is_advantage(node.right) and _is_ratio(node.left)):
                return GRPO
        if isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name)):
            backward |= (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id) == "backward"
    return NOT_GRPO if backward else UNKNOWN
