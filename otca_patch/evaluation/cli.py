"""``otca-patch eval --base MODEL_DIR --checkpoint DIR [--checkpoint DIR ...] --prompts FILE --rewards ...``

Generates one image per prompt (seed = --seed + the prompt's line index, so a prompt's image does
not depend on the batch it falls in) from the base FLUX model (diffusers layout) with each
checkpoint's transformer (DanceGRPO's checkpoint-<step>-<epoch> folders; an output_dir expands to
all of them; "base" is the base model itself), scores the images with the reward registry and prints
the paper's Table 1 layout (rows = checkpoints, columns = metrics). Results are cached per
checkpoint and prompt set under OUT/cache, one entry per prompt, so an interrupted run resumes.

Everything is checked before the FLUX pipeline loads (minutes for the real model): the options, the
prompts, the checkpoints, the reward names, and the reward models themselves (loaded first: a
missing reward checkpoint or a bad --reward_opt stops the run in seconds).

``otca-patch eval --smoke [--out DIR]``: the same end to end on the CPU with tiny, randomly
initialised models written under DIR/smoke_inputs (a tiny FLUX pipeline, two DanceGRPO-layout
checkpoints, the five image rewards' tiny checkpoints, three prompts).
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from ..help_text import PlainDescriptionFormatter
from ..flags import comma_list as _csv, name_options as _reward_options, name_values as _checkpoints
from .cache import EntryCache, cache_key, folder_fingerprint
from .checkpoints import Checkpoint, FileHashes, find_checkpoints, load_transformer
from .table import format_table

DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
#: prompts shown in samples.png (the first ones of --prompts)
SHOWN_PROMPTS = 8


def read_prompts(path: Path) -> list[str]:
    """One prompt per line; blank lines are skipped (indices count the prompts, not the lines)."""
    try:
        prompts = [line.strip() for line in path.read_text().splitlines() if line.strip()]
    except OSError as exc:
        raise ValueError(f"--prompts {path}: cannot be read ({exc.strerror})") from None
    if not prompts:
        raise ValueError(f"--prompts {path}: no prompts (one per line expected)")
    return prompts


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="otca-patch eval", description=__doc__,
                                     formatter_class=PlainDescriptionFormatter)
    parser.add_argument("--smoke", action="store_true", help="run end to end on the CPU with tiny models (no other "
                        "input needed)")
    parser.add_argument("--base", type=Path, help="base FLUX model folder (diffusers layout); required")
    parser.add_argument("--checkpoint", action="append",
                        help="checkpoint folder, output_dir of several, or 'base' (repeatable); required")
    parser.add_argument("--prompts", type=Path, help="text file, one prompt per line; required")
    parser.add_argument("--rewards", type=_csv, default=("clip_t", "aesthetic", "hpsv2", "pickscore", "imagereward"),
                        help="comma-separated registry rewards (default: the paper's five)")
    parser.add_argument("--reward_ckpt", type=_checkpoints, action="append", default=[],
                        help="NAME=PATH[,NAME=PATH] (default: each reward's OTCA_CKPT_* variable)")
    parser.add_argument("--reward_opt", type=_reward_options, action="append", default=[],
                        help="NAME.KEY=VALUE[,...] options for a reward's loader")
    parser.add_argument("--seed", type=int, default=0,
                        help="the prompt on line i gets seed --seed + i, whatever batch it falls in (default: 0)")
    parser.add_argument("--batch_size", type=int, default=4, help="images generated at once (default: 4)")
    parser.add_argument("--num_steps", type=int, default=28, help="sampling steps")
    parser.add_argument("--guidance", type=float, default=3.5, help="FLUX-dev's distilled guidance")
    parser.add_argument("--height", type=int, default=1024, help="image height in pixels (default: 1024)")
    parser.add_argument("--width", type=int, default=1024, help="image width in pixels (default: 1024)")
    parser.add_argument("--max_sequence_length", type=int, default=512, help="T5 tokens per prompt")
    parser.add_argument("--dtype", choices=sorted(DTYPES), help="default: bf16 on CUDA, fp32 on CPU")
    parser.add_argument("--device", help="default: cuda if available, else cpu")
    parser.add_argument("--out", type=Path, default=Path("eval"), help="cache, table.md and results.json (default ./eval)")
    return parser


def _merged(dicts: list[dict]) -> dict:
    merged: dict = {}
    for entry in dicts:
        for name, value in entry.items():
            merged[name] = {**merged.get(name, {}), **value} if isinstance(value, dict) else value
    return merged


def _file_safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_")


class Evaluator:
    """Loads the pipeline and the rewards only when some entry is missing."""

    def __init__(self, args, dtype, device):
        self.args, self.dtype, self.device = args, dtype, device
        self.pipe = self.rewards = None

    def prepare(self, checkpoint: Checkpoint) -> None:
        import torch
        from diffusers import FluxPipeline, FluxTransformer2DModel

        self.load_rewards()
        if self.pipe is None:
            self.pipe = FluxPipeline.from_pretrained(str(self.args.base), transformer=None, torch_dtype=self.dtype)
            self.pipe.to(self.device)
            self.pipe.set_progress_bar_config(disable=True)
        self.pipe.transformer = None
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        if checkpoint.folder is None:
            transformer = FluxTransformer2DModel.from_pretrained(str(self.args.base), subfolder="transformer",
                                                                 torch_dtype=self.dtype)
        else:
            transformer = load_transformer(checkpoint, self.dtype)
        self.pipe.transformer = transformer.to(self.device).eval()

    def load_rewards(self) -> None:
        """The reward models (seconds), before the pipeline (minutes): their errors come first."""
        if self.rewards is None:
            from ..rewards import RewardSet

            self.rewards = RewardSet(list(self.args.rewards), checkpoints=_merged(self.args.reward_ckpt),
                                     options=_merged(self.args.reward_opt), device=self.device)

    def run_batch(self, prompts: list[str], seeds: list[int]):
        import torch

        args = self.args
        generators = [torch.Generator("cpu").manual_seed(seed) for seed in seeds]
        with torch.no_grad():
            images = self.pipe(prompt=prompts, height=args.height, width=args.width, num_inference_steps=args.num_steps,
                               guidance_scale=args.guidance, generator=generators,
                               max_sequence_length=args.max_sequence_length, output_type="pil").images
            # one image at a time: reward models' float32 matmuls round differently for another batch
            # size (up to ~1e-6 here), and a resumed run must give a cached prompt the same number
            scored = [self.rewards.score([image], [prompt]) for image, prompt in zip(images, prompts)]
        return images, [row for s in scored for row in s.scores.float().cpu().tolist()], scored[0].names


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.smoke:
            from .smoke import smoke_arguments

            args = smoke_arguments(args)
        return evaluate(args)
    except ValueError as exc:
        print(f"otca-patch eval: error: {exc}", file=sys.stderr)
        return 2


def validate(args) -> None:
    """The options and reward names, before anything loads; ``ValueError`` naming the flag."""
    from difflib import get_close_matches

    from ..rewards import available

    missing = [f"--{name}" for name in ("base", "checkpoint", "prompts") if not getattr(args, name)]
    if missing:
        raise ValueError(f"{', '.join(missing)} required (or --smoke for a CPU run with tiny models)")
    for name in ("batch_size", "num_steps", "max_sequence_length"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name} must be at least 1, got {getattr(args, name)}")
    for name in ("height", "width"):
        if getattr(args, name) < 16 or getattr(args, name) % 16:
            raise ValueError(f"--{name} must be a positive multiple of 16 (FLUX: 8x VAE, 2x2 patches), "
                             f"got {getattr(args, name)}")
    if not args.rewards:
        raise ValueError("--rewards names no reward")
    known = available()
    for name in args.rewards:
        if name not in known:
            near = get_close_matches(name, known, n=1)
            raise ValueError(f"--rewards: unknown reward {name!r}" + (f"; did you mean {near[0]!r}?" if near else "")
                             + f" (registry: {', '.join(known)})")
    for flag, given in (("--reward_ckpt", _merged(args.reward_ckpt)), ("--reward_opt", _merged(args.reward_opt))):
        stray = sorted(set(given) - set(args.rewards))
        if stray:
            raise ValueError(f"{flag} names {', '.join(stray)}, which --rewards does not evaluate "
                             f"({', '.join(args.rewards)})")


def evaluate(args) -> int:
    """Scores every checkpoint on every prompt (from the cache where it holds them), then writes the table,
    ``results.json`` and the samples grid into ``--out``."""
    import torch

    validate(args)
    if not (args.base / "model_index.json").is_file():
        raise ValueError(f"--base {args.base}: no model_index.json (a diffusers pipeline folder expected)")
    prompts = read_prompts(args.prompts)
    checkpoints = find_checkpoints(args.checkpoint)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype_name = args.dtype or ("bf16" if device.type == "cuda" else "fp32")
    dtype = getattr(torch, DTYPES[dtype_name])
    hashes = FileHashes(args.out / "cache" / "file_hashes.json")
    reward_ckpt, reward_opt = _merged(args.reward_ckpt), _merged(args.reward_opt)
    common = {"base": folder_fingerprint(args.base), "prompts": prompts, "seed": args.seed, "steps": args.num_steps,
              "guidance": args.guidance, "height": args.height, "width": args.width,
              "max_sequence_length": args.max_sequence_length, "dtype": dtype_name, "rewards": list(args.rewards),
              "reward_ckpt": {n: _fingerprint(Path(p), hashes) for n, p in reward_ckpt.items()},
              "reward_opt": reward_opt}

    caches, todo = _checkpoint_caches(args, checkpoints, common, hashes, len(prompts))
    missing = sum(len(t) for t in todo)
    print(f"otca-patch eval: {len(checkpoints)} checkpoints x {len(prompts)} prompts; "
          f"{len(checkpoints) * len(prompts) - missing} cached, {missing} to compute", file=sys.stderr)
    _compute_missing(args, Evaluator(args, dtype, device), checkpoints, caches, todo, prompts)
    _write_results(args, checkpoints, caches, prompts, common)
    return 0


def _checkpoint_caches(args, checkpoints: list[Checkpoint], common: dict, hashes: FileHashes,
                       n_prompts: int) -> tuple[list[EntryCache], list[list[int]]]:
    """Per checkpoint, its cache (keyed by the settings ``common`` and the checkpoint's weights) and the
    indices of the prompts it does not hold yet."""
    caches, todo = [], []
    for checkpoint in checkpoints:
        if checkpoint.folder is None:
            weights = [hashes(p) for p in sorted((args.base / "transformer").glob("*.safetensors"))]
        else:
            weights = hashes(checkpoint.weights)
        key = cache_key({**common, "checkpoint": weights})
        cache = EntryCache(args.out / "cache" / f"{_file_safe(checkpoint.label)}-{key[:16]}", {**common, "checkpoint": weights})
        caches.append(cache)
        todo.append([i for i in range(n_prompts) if cache.get(i) is None])
    return caches, todo


def _compute_missing(args, evaluator: Evaluator, checkpoints: list[Checkpoint], caches: list[EntryCache],
                     todo: list[list[int]], prompts: list[str]) -> None:
    """Generates and scores the images of the prompts ``todo`` per checkpoint, in batches, into its cache."""
    from tqdm import tqdm

    missing = sum(len(t) for t in todo)
    if missing:
        evaluator.load_rewards()  # a missing reward checkpoint or a bad option stops here, before the pipeline
    with tqdm(total=missing, unit="image", desc="eval", file=sys.stderr, disable=not missing) as progress:
        for checkpoint, cache, indices in zip(checkpoints, caches, todo):
            if not indices:
                continue
            progress.set_postfix_str(checkpoint.label)
            evaluator.prepare(checkpoint)
            for start in range(0, len(indices), args.batch_size):
                batch = indices[start:start + args.batch_size]
                seeds = [args.seed + i for i in batch]
                images, scores, names = evaluator.run_batch([prompts[i] for i in batch], seeds)
                for index, seed, image, row in zip(batch, seeds, images, scores):
                    cache.put(index, {"index": index, "prompt": prompts[index], "seed": seed,
                                      "scores": dict(zip(names, row))}, image)
                progress.update(len(batch))


def _write_results(args, checkpoints: list[Checkpoint], caches: list[EntryCache], prompts: list[str],
                   common: dict) -> None:
    """Prints the table of each checkpoint's mean scores and writes it (``table.md``), every score
    (``results.json``) and the samples grid (``samples.png``) into ``--out``."""
    rows, results, metrics = [], {}, None
    for checkpoint, cache in zip(checkpoints, caches):
        entries = [cache.get(i) for i in range(len(prompts))]
        metrics = metrics or list(entries[0]["scores"])
        means = {m: sum(e["scores"][m] for e in entries) / len(entries) for m in metrics}
        rows.append((checkpoint.label, means))
        results[checkpoint.label] = {"folder": str(checkpoint.folder or args.base), "cache": str(cache.folder),
                                     "means": means, "per_prompt": [e["scores"] for e in entries]}
    table = format_table(rows, metrics, len(prompts))
    print(table)
    args.out.mkdir(parents=True, exist_ok=True)
    shown = samples_grid([c.label for c in checkpoints], caches, prompts)
    shown.save(args.out / "samples.png")
    (args.out / "table.md").write_text(table + f"\n\n![samples](samples.png)\n\n{samples_caption(prompts)}\n")
    (args.out / "results.json").write_text(json.dumps({"prompts": str(args.prompts), "settings": {
        k: v for k, v in common.items() if k not in ("base", "prompts")}, "checkpoints": results}, indent=1))
    print(f"otca-patch eval: wrote table.md, results.json and samples.png in {args.out}", file=sys.stderr)


def samples_grid(labels: list[str], caches: list[EntryCache], prompts: list[str]):
    """One row per checkpoint, one column per shown prompt: the images the table scored."""
    from PIL import Image

    from ..sample_grid import sample_grid

    def image(cache: EntryCache, index: int):
        path = cache.image(index)
        if not path.is_file():
            return None
        with Image.open(path) as opened:
            return opened.convert("RGB")

    shown = prompts[:SHOWN_PROMPTS]
    return sample_grid([(label, [image(cache, i) for i in range(len(shown))]) for label, cache in zip(labels, caches)],
                       shown)


def samples_caption(prompts: list[str]) -> str:
    count = min(len(prompts), SHOWN_PROMPTS)
    return (f"The images scored above for the first {count} of {len(prompts)} prompts; in a column every checkpoint "
            "had the same seed, so the same initial noise.")


def _fingerprint(path: Path, hashes: FileHashes):
    if path.is_file():
        return hashes(path)
    if path.is_dir():
        return folder_fingerprint(path)
    raise ValueError(f"--reward_ckpt: {path} does not exist")


if __name__ == "__main__":
    sys.exit(main())
