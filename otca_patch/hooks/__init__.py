"""The hook engine: declarative hook-point specs, strict AST anchors, rewrites compiled under upstream's name."""
from .errors import PatchError
from .rewrite import HookStatus, check, compile_target, rewrite
from .spec import Hook, TargetSpec, load_spec, load_specs

__all__ = ["PatchError", "HookStatus", "check", "compile_target", "rewrite", "Hook", "TargetSpec",
           "load_spec", "load_specs"]
