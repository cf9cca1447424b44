"""What the plug-in was verified on in VeRL-Omni (a1139ba): the functions it wraps or relies on, their
parameters and code, and the batch keys its credit reads. Read from the source files alone (no import of
VeRL-Omni), so ``otca-patch doctor`` checks a checkout from any environment and the plug-in checks the
installed VeRL-Omni at load with the same rules."""
from __future__ import annotations

import ast
import hashlib
from dataclasses import dataclass
from pathlib import Path

VERIFIED_COMMIT = "a1139bafffb5b9711f0a6b6edff8ecaa60bfff30"
TRAINER = "verl_omni/trainer/diffusion/ray_diffusion_trainer.py"
TRAINER_V1 = "verl_omni/trainer/diffusion/v1/trainer_base.py"
ALGOS = "verl_omni/trainer/diffusion/diffusion_algos.py"
MULTI_REWARD = "verl_omni/reward_loop/reward_manager/multi.py"
ROLLOUT_SERVER = "verl_omni/workers/rollout/vllm_rollout/vllm_omni_async_server.py"


@dataclass(frozen=True)
class Function:
    """A function (``Class.method`` for a method) whose parameters and code must be as verified."""

    file: str
    name: str
    parameters: tuple
    digest: str  # of its code less its docstring (``code_digest``)
    why: str


#: the functions the plug-in wraps, calls or reads the output of
FUNCTIONS = (
    Function(TRAINER, "compute_advantage",
             ("data", "adv_estimator", "norm_adv_by_std_in_grpo", "global_std", "config"),
             "84167364ff33959d", "the plug-in wraps it: it passes the estimator the batch's rewards and groups"),
    Function(TRAINER_V1, "PolicyGradientDiffusionTrainerV1._compute_advantage", ("self", "data"),
             "11c7548489d97ffa", "the v1 trainer's advantage block: the batch keys it fills, its own binding"),
    Function(ALGOS, "register_diffusion_adv_est", ("name_or_enum",),
             "c3d6f9c1416c4f16", "the registry the estimators are registered with"),
    Function(ALGOS, "get_diffusion_adv_estimator_fn", ("name_or_enum",),
             "e43fe70dffd960bc", "the registry lookup compute_advantage makes"),
    Function(MULTI_REWARD, "MultiVisualRewardManager.run_single", ("self", "data"),
             "15812a80b2e72748", "it writes each objective's score as reward/<key>"),
)
#: string constants that must occur in a file: the batch keys the credit reads and where they come from
BATCH_KEYS = (
    (TRAINER, ("sample_level_rewards", "sample_level_scores", "old_log_probs", "uid")),
    (TRAINER_V1, ("sample_level_rewards", "sample_level_scores", "old_log_probs")),
    (ALGOS, ("flow_grpo", "dance_grpo")),
    (ROLLOUT_SERVER, ("all_latents", "all_timesteps")),
)
#: the modules that bind ``compute_advantage`` by name (each is rebound to the plug-in's wrapper)
BINDERS = (TRAINER, TRAINER_V1)


def code_digest(node: ast.AST) -> str:
    """16 hex digits of the function's code as ``ast.unparse`` writes it, its docstring left out
    (formatting, comments and the docstring may change; code may not)."""
    body = list(node.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]
    copy = ast.FunctionDef(name=node.name, args=node.args, body=body, decorator_list=node.decorator_list,
                           returns=node.returns, type_comment=None, lineno=0, col_offset=0)
    if hasattr(node, "type_params"):  # Python 3.12
        copy.type_params = node.type_params
    return hashlib.sha256(ast.unparse(copy).encode()).hexdigest()[:16]


def parameters(node) -> tuple:
    args = node.args
    names = [a.arg for a in args.posonlyargs + args.args]
    names += ["*" + args.vararg.arg] if args.vararg else []
    names += [a.arg for a in args.kwonlyargs]
    names += ["**" + args.kwarg.arg] if args.kwarg else []
    return tuple(names)


def find_function(tree: ast.Module, name: str):
    """The ``FunctionDef`` named ``name`` (``Class.method``) at the top of ``tree``; None if absent."""
    scope = tree.body
    *classes, function = name.split(".")
    for class_name in classes:
        found = [n for n in scope if isinstance(n, ast.ClassDef) and n.name == class_name]
        if not found:
            return None
        scope = found[0].body
    found = [n for n in scope if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == function]
    return found[0] if found else None


def _string_constants(tree: ast.Module) -> set:
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def _binds_compute_advantage(tree: ast.Module) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and any(a.name == "compute_advantage" for a in node.names):
            return True
        if isinstance(node, ast.FunctionDef) and node.name == "compute_advantage" and node in tree.body:
            return True
    return False


def check(root: Path) -> list[tuple[str, str]]:
    """Every item of the contract against the VeRL-Omni checkout (or installed package's parent) ``root``:
    ``(item, "ok" or what differs)``, in a fixed order."""
    root = Path(root)
    trees, results = {}, []

    def tree_of(file: str):
        if file not in trees:
            path = root / file
            try:
                trees[file] = ast.parse(path.read_text(), str(path))
            except (OSError, SyntaxError) as exc:
                trees[file] = exc
        return trees[file]

    for function in FUNCTIONS:
        item = f"{function.file}::{function.name}"
        tree = tree_of(function.file)
        if isinstance(tree, Exception):
            results.append((item, f"cannot read {function.file}: {tree}"))
            continue
        node = find_function(tree, function.name)
        if node is None:
            results.append((item, f"{function.name} is gone from {function.file}"))
        elif parameters(node) != function.parameters:
            results.append((item, f"{function.name}'s parameters are ({', '.join(parameters(node))}); verified: "
                                  f"({', '.join(function.parameters)})"))
        elif code_digest(node) != function.digest:
            results.append((item, f"{function.name}'s code changed (digest {code_digest(node)}, verified "
                                  f"{function.digest})"))
        else:
            results.append((item, "ok"))
    for file, keys in BATCH_KEYS:
        tree = tree_of(file)
        item = f"{file}: batch keys {', '.join(keys)}"
        if isinstance(tree, Exception):
            results.append((item, f"cannot read {file}: {tree}"))
            continue
        absent = [k for k in keys if k not in _string_constants(tree)]
        results.append((item, f"no longer names {', '.join(absent)}" if absent else "ok"))
    binders = sorted(str(p.relative_to(root)) for p in (root / "verl_omni").rglob("*.py")
                     if "compute_advantage" in p.read_text(errors="replace")
                     and _binds_compute_advantage(ast.parse(p.read_text(errors="replace"))))
    item = "modules binding compute_advantage"
    extra = [b for b in binders if b not in BINDERS]
    results.append((item, f"also bound in {', '.join(extra)} (the plug-in rebinds only "
                          f"{', '.join(BINDERS)})" if extra else "ok"))
    return results


def problems(root: Path) -> list[str]:
    """What differs from the verified contract, one line each (empty: it holds)."""
    return [f"{item}: {status}" for item, status in check(root) if status != "ok"]
