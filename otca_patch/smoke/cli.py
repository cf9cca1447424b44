"""``otca-patch smoke UPSTREAM_DIR OUT_DIR [--target NAME] [--steps N] [--seed S] [--otca --otca_* ...]``
(also ``python -m otca_patch.smoke ...``, so ``torchrun -m`` / ``accelerate launch -m`` work):
run the real upstream trainer step on the CPU with tiny models, with or without the layer.

UPSTREAM_DIR is a DanceGRPO, FlowGRPO or MixGRPO checkout (e.g. upstream/DanceGRPO); --target picks
dancegrpo-flux (the default for DanceGRPO; mixgrpo-flux for MixGRPO, told by the file's content) or
another smoke target (see --target's choices; dancegrpo-wan22 needs --otca or --otca_observe).
Without --otca the upstream file runs unpatched; with --otca alone the objectives are upstream's
reward and a tiny CLIP-T from the reward registry. Upstream's own outputs (images/, reward.txt),
the run log and smoke.json ({"otca": bool, "steps": [{"loss": x, "grad_norm": y}, ...]}) land in
OUT_DIR; the last line says ``smoke: passed`` or ``smoke: failed`` and where they are. Works under
``torchrun --nproc_per_node 2`` too (a gloo world on the CPU). With
``OTCA_SMOKE_DEVICE=cuda`` each rank runs on its GPU, ``cuda:{LOCAL_RANK}``, in an NCCL world
(scripts/gpu_check.sh).
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import shlex
import sys
import traceback
from dataclasses import replace
from pathlib import Path

from .. import env_names
from ..config import OtcaConfig, config_from_environment, environment_flags_note
from ..files import shown_path
from ..flags import OneLineParser, add_flags, from_namespace
from ..help_text import PlainDescriptionFormatter
from ..hooks.checkout import check_upstream_dir
from ..hooks.errors import PatchError
from ..runlog import LOG_NAME
from ..hooks.spec import Smoke, load_specs
from .sizes import SmokeSizes, size_help


PROG = "otca-patch smoke"


def smoke_targets() -> dict:
    """``{target name: (spec, Smoke)}`` of every target with a smoke run (its spec's ``[target.smoke]``);
    a smoke's ``variants`` (another model layout on the same trainer) join under their own names."""
    targets = {}
    for spec in load_specs():
        if spec.smoke.runs:
            targets[spec.name] = (spec, spec.smoke)
        for name, module in spec.smoke.variants:
            targets[name] = (spec, Smoke(module=module, objectives=spec.smoke.objectives))
    return targets


def smoke_module(name: str, smoke: Smoke):
    """The smoke module of target ``name``: ``Sizes`` (a dataclass of size flags) and
    ``run(upstream_dir, out_dir, config, sizes, reward_root, probe) -> dict``; with a ``harness``,
    the family's smoke of the spec's file, built from its ``[target.smoke]`` table."""
    if smoke.harness:
        return importlib.import_module(f"otca_patch.smoke.{smoke.harness}").target_smoke(name, smoke)
    module = importlib.import_module(smoke.module)
    missing = [attr for attr in ("Sizes", "run") if not hasattr(module, attr)]
    if missing:
        raise ValueError(f"target {name}: smoke module {smoke.module} lacks {', '.join(missing)}")
    return module


def load_probe(text: str):
    """``FILE.py:NAME`` -> the object NAME of that file (test-only code stays out of the package)."""
    path, sep, name = text.rpartition(":")
    if not sep or not path.endswith(".py") or not os.path.isfile(path):
        raise argparse.ArgumentTypeError(f"expected an existing FILE.py:NAME, got {text!r}")
    spec = importlib.util.spec_from_file_location(f"otca_smoke_probe_{Path(path).stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not callable(getattr(module, name, None)):
        raise argparse.ArgumentTypeError(f"{path} defines no {name}")
    return getattr(module, name)


def detect_target(upstream_dir: Path, targets: dict) -> str:
    """The first smoke target whose upstream file exists in ``upstream_dir`` (where several upstreams
    share the file, the one whose spec its content picks)."""
    from ..hooks.select import SpecChoiceError, choose_spec

    for name, (spec, _) in targets.items():
        path = upstream_dir / spec.file
        if not path.is_file():
            continue
        sharing = list({id(s): s for s, _ in targets.values() if s.file == spec.file}.values())
        try:
            if len(sharing) > 1 and choose_spec(path, sharing).spec is not spec:
                continue
        except SpecChoiceError:
            pass
        return name
    raise ValueError(f"{upstream_dir} holds none of the smoke targets' files "
                     f"({', '.join(spec.file for spec, _ in targets.values())}); pass an upstream checkout")


def build_parser(sizes_type) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__, formatter_class=PlainDescriptionFormatter,
                                     usage=f"{PROG} UPSTREAM_DIR OUT_DIR [--target NAME] [sizes] [--otca --otca_* ...]")
    parser.add_argument("upstream_dir", type=Path, help="upstream checkout, e.g. upstream/DanceGRPO")
    parser.add_argument("out_dir", type=Path, help="where upstream's outputs, the run log and smoke.json go")
    parser.add_argument("--target", choices=sorted(smoke_targets()), metavar="NAME",
                        help="the smoke target: which trainer of the checkout runs (default: detected from the "
                             "checkout), one of %(choices)s; for your copy of a trainer give --otca_target "
                             "NAME=PATH as well")
    # tests only: NAME(upstream_module, log_prob_index=...) wraps upstream's functions; its save(path)
    # writes what it recorded (terms_rank<r>.pt)
    parser.add_argument("--probe", metavar="FILE.py:NAME", type=load_probe, help=argparse.SUPPRESS)
    sizes = parser.add_argument_group("sizes of the tiny run (a target's own: otca-patch smoke CHECKOUT OUT "
                                      "--target NAME --help)")
    add_flags(sizes, sizes_type, fallback_help=size_help)
    layer = parser.add_argument_group("the layer's flags (as otca-patch launch takes them; none: vanilla)")
    add_flags(layer, OtcaConfig)
    return parser


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault(env_names.STARTED_IN, os.getcwd())  # paths are printed from here, not from the run folder
    note = environment_flags_note(PROG)
    if note and os.environ.get("RANK", "0") == "0":
        print(note, file=sys.stderr, flush=True)
    try:
        # as a launched process: $OTCA_PATCH_ARGS, then the flags given here
        config, rest = config_from_environment(argv)
        targets = smoke_targets()
        peek = OneLineParser(add_help=False)  # a mistyped --target: one line with "did you mean"
        peek.add_argument("upstream_dir", type=Path, nargs="?")
        peek.add_argument("--target")
        known, _ = peek.parse_known_args(rest)
        if known.upstream_dir is None:
            build_parser(SmokeSizes).parse_args(rest)  # usage, or --help with the sizes every target has
        if known.target is not None:
            check_target_name(known.target, known.upstream_dir, targets)
        check_upstream_dir(known.upstream_dir)
        config = with_explicit_targets(config, known.upstream_dir)
        name = known.target or detect_target(known.upstream_dir, targets)
        smoke = targets[name][1]
        module = smoke_module(name, smoke)
        if os.environ.get("RANK", "0") == "0":
            trainer_notes(config, known.upstream_dir, targets[name][0])
    except ValueError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    args = build_parser(module.Sizes).parse_args(rest)
    from ..rewards.clip_libs import MissingPackage  # here: imports torch, which --help does not need
    out_dir = args.out_dir.resolve()
    reward_root = out_dir / "tiny_rewards"
    try:
        getattr(module, "before_imports", lambda: None)()  # e.g. which transformers (the tiny rewards import it)
        if config.active:
            given = shlex.split(os.environ.get(env_names.ARGS, "")) + argv
            config = with_smoke_defaults(config, given, reward_root, smoke.objectives)
        sizes = from_namespace(module.Sizes, args)
        module.run(args.upstream_dir.resolve(), out_dir, config, sizes, reward_root, probe=args.probe)
    except (PatchError, ValueError, MissingPackage) as exc:  # MissingPackage: a reward's library, one line
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return closing_line(name, config, out_dir, failed=2)
    except SystemExit as exc:  # a smoke module's refusal (a missing package): its message, then the verdict
        if exc.code in (0, None):
            return closing_line(name, config, out_dir)
        print(exc.code if isinstance(exc.code, str) else f"exit status {exc.code}", file=sys.stderr)
        return closing_line(name, config, out_dir, failed=exc.code if isinstance(exc.code, int) else 1)
    except Exception:
        traceback.print_exc()
        return closing_line(name, config, out_dir, failed=1)
    return closing_line(name, config, out_dir)


def closing_line(name: str, config, out_dir: Path, failed: int = 0) -> int:
    """The run's last line, ``smoke: passed`` or ``smoke: failed``, with where its outputs and run log
    are (rank 0; a failing rank says so too). Returns the exit status."""
    rank = os.environ.get("RANK", "0")
    if rank != "0" and not failed:
        return 0
    sys.stdout.flush()
    mode = "--otca_observe" if config.otca_observe else f"--otca (mode {config.otca_mode})" if config.otca else "vanilla"
    log_dir = Path(config.otca_log_dir)
    log = (log_dir if log_dir.is_absolute() else out_dir / log_dir) / LOG_NAME
    where = f"outputs in {shown_path(out_dir)}" + (f", run log {shown_path(log)}" if config.active and log.is_file() else "")
    verdict = f"failed{'' if rank == '0' else f' on rank {rank}'} (the error above)" if failed else "passed"
    print(f"smoke: {verdict}: {name}, {mode}; {where}", file=sys.stderr if failed else sys.stdout, flush=True)
    return failed


def check_target_name(target: str, upstream_dir: Path, targets: dict) -> None:
    """``--target`` takes a smoke target's name; a file given there (a copy of a trainer) gets the
    ``--otca_target`` that runs it, and a mistyped name its nearest one (a ``ValueError``)."""
    from ..hooks.coverage import COPY, classify
    from ..hooks.explicit_targets import FLAG, resolve_in
    from ..hooks.spec import load_specs
    from ..suggest import did_you_mean

    if target in targets:
        return
    if target.endswith(".py") or "/" in target:
        path = resolve_in(target, upstream_dir)
        if not path.is_file():
            raise ValueError(f"--target takes a smoke target's name, not a file, and {path} does not exist")
        verdict = classify(path, upstream_dir, load_specs())
        name = verdict.spec.name if verdict.kind == COPY and verdict.spec.name in targets else "NAME"
        raise ValueError(f"--target takes a smoke target's name, not a file; to run your copy {target} give "
                         f"{FLAG} {name}={target}" + (" (`otca-patch doctor .` names the spec that holds on it)"
                                                       if name == "NAME" else f" (with --target {name} or none)"))
    raise ValueError(f"--target: no smoke target {target!r}{did_you_mean(target, sorted(targets))} "
                     f"(`otca-patch smoke --help` lists them)")


def trainer_notes(config, upstream_dir: Path, spec) -> None:
    """Says which trainer file runs when the user may not expect it: the ``--otca_target`` copy run
    without the layer, or the original run while a copy of it sits beside it."""
    from ..hooks.copies import warn_unused_copies
    from ..hooks.spec import load_specs

    if spec is None:  # a smoke without a spec of its own: no file to say anything of
        return
    specs = load_specs()
    copies = [path for path, name in config.otca_target.items()
              if next((s.file for s in specs if s.name == name), None) == spec.file]
    if not copies:
        warn_unused_copies(PROG, upstream_dir, [spec], specs, config.otca_target)
    elif not config.active:
        print(f"{PROG}: --otca_target without --otca: running your copy {shown_path(Path(copies[0]))} vanilla "
              f"(as upstream's file would run); add --otca to run it with the layer", file=sys.stderr, flush=True)


def with_explicit_targets(config, upstream_dir: Path):
    """``--otca_target`` files as absolute paths (the run changes its working directory), each
    checked to exist and to name a spec."""
    from ..hooks.explicit_targets import explicit_specs, resolve_in
    from ..hooks.spec import load_specs

    if not config.otca_target:
        return config
    chosen = {str(resolve_in(path, upstream_dir)): name for path, name in config.otca_target.items()}
    explicit_specs(chosen, load_specs())
    return replace(config, otca_target=chosen)


def with_smoke_defaults(config, argv, reward_root: Path, default_rewards: tuple):
    """--otca alone: the target's smoke objectives (its spec's); the run log beside the
    outputs; tiny checkpoints for registry rewards. ``argv``: the flags given (environment and argv)."""
    from ..rewards import available, tiny

    changes = {}
    if not any(a.split("=")[0] == "--otca_rewards" for a in argv):
        changes["otca_rewards"] = default_rewards
    if not any(a.split("=")[0] == "--otca_log_dir" for a in argv):
        changes["otca_log_dir"] = str(reward_root.parent)
    config = replace(config, **changes)
    # registry models need checkpoints; any other name is upstream's own reward (or an error, later)
    registry = {name.split(".")[0] for name in config.otca_rewards} & set(available()) - set(config.otca_reward_ckpt)
    if registry - {"clip_t"}:
        raise ValueError(f"the smoke run builds a tiny checkpoint for clip_t only; give "
                         f"{', '.join(sorted(registry - {'clip_t'}))} with --otca_reward_ckpt / --otca_reward_opt")
    if "clip_t" in registry:
        config = replace(config, otca_reward_ckpt={"clip_t": str(tiny.build_clip(reward_root)), **config.otca_reward_ckpt},
                         otca_reward_opt={"clip_t": {"model_name": tiny.TINY_CLIP_ARCH}, **config.otca_reward_opt})
    return config
