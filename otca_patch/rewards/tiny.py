"""Tiny randomly initialised reward checkpoints in the published on-disk layouts.

For tests, ``scripts/bench_rewards.py`` and CPU demos: each builder writes files with the same
names, formats and state-dict keys as the real checkpoints (so they load through the real loading
code) but with 1-layer, 32-64 wide models at 32x32 pixels. Nothing is downloaded; scores are
meaningless but deterministic for a given seed.

``build_all(root)`` returns ``(checkpoints, options)`` ready for ``RewardSet(names, checkpoints,
options=options)``.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Dict, Tuple, Union

import torch

from .clip_libs import bpe_vocab_file, import_hpsv2_open_clip, import_open_clip, open_clip_name

#: Architecture names the tiny configs are registered under (open_clip and hpsv2's open_clip).
TINY_CLIP_ARCH = "otca-tiny-clip"
TINY_HPS_ARCH = "otca-tiny-hps"
TINY_IMAGE_SIZE = 32

_TINY_CLIP_CFG = {
    "embed_dim": 32,
    "vision_cfg": {"image_size": TINY_IMAGE_SIZE, "layers": 1, "width": 64, "head_width": 32, "patch_size": 16},
    "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1},
}


def save_whole(path: Path, save) -> None:
    """``save(file)`` writes ``path``'s content; ``path`` then holds it or its old content, never a part: the
    ranks of a smoke run build the same tiny files in one folder, and one rank may read a file while another
    writes it (a ``torch.save`` over the file truncated it under the reading rank)."""
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    save(str(partial))
    os.replace(partial, path)


def write_whole(path: Path, text: str) -> None:
    """``path`` holds ``text`` or its old content, never a part (``save_whole``)."""
    save_whole(path, lambda file: Path(file).write_text(text, encoding="utf-8"))


def _register_config(root: Path, name: str, add_model_config) -> None:
    folder = root / f"configs-{name}"
    folder.mkdir(parents=True, exist_ok=True)
    write_whole(folder / f"{name}.json", json.dumps(_TINY_CLIP_CFG))
    add_model_config(folder)


def register_tiny_open_clip(root: Union[str, Path]) -> str:
    """Register ``otca-tiny-clip`` with open_clip, or hpsv2's copy of it where open_clip is absent
    (configs live under ``root``); returns the name."""
    open_clip = import_open_clip("the tiny CLIP")
    if TINY_CLIP_ARCH not in open_clip.list_models():
        _register_config(Path(root), TINY_CLIP_ARCH, open_clip.add_model_config)
    return TINY_CLIP_ARCH


def register_tiny_hpsv2(root: Union[str, Path]) -> str:
    """Register ``otca-tiny-hps`` with hpsv2's vendored open_clip; returns the name."""
    hps_open_clip = import_hpsv2_open_clip()
    if TINY_HPS_ARCH not in hps_open_clip.list_models():
        _register_config(Path(root), TINY_HPS_ARCH, hps_open_clip.add_model_config)
    return TINY_HPS_ARCH


def build_clip(root: Union[str, Path], seed: int = 0) -> Path:
    """A tiny QuickGELU CLIP for ``clip_t`` / ``aesthetic``, in the format this environment loads:
    ``clip/open_clip_model.safetensors`` (the layout of timm/vit_large_patch14_clip_224.openai) where
    open_clip or hpsv2's copy is installed, else the transformers folder ``clip-hf/`` (the layout of
    openai/clip-vit-large-patch14)."""
    from safetensors.torch import save_file

    from .clip_backbone import quiet_random_init

    root = Path(root)
    if open_clip_name() is None:
        return _build_clip_transformers(root / "clip-hf", seed)
    open_clip = import_open_clip("the tiny CLIP")
    arch = register_tiny_open_clip(root)
    torch.manual_seed(seed)
    with quiet_random_init():
        model = open_clip.create_model(arch, pretrained=None, force_quick_gelu=True)
    path = root / "clip" / "open_clip_model.safetensors"
    path.parent.mkdir(parents=True, exist_ok=True)
    save_whole(path, lambda file: save_file({k: v.contiguous() for k, v in model.state_dict().items()}, file))
    return path


def _tiny_clip_config():
    """A 1-layer, 32-wide transformers CLIP at TINY_IMAGE_SIZE with OpenAI CLIP's vocabulary size."""
    from transformers import CLIPConfig

    sizes = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2)
    return CLIPConfig(
        text_config=dict(vocab_size=49408, max_position_embeddings=77, bos_token_id=49406, eos_token_id=49407,
                         pad_token_id=49407, **sizes),
        vision_config=dict(image_size=TINY_IMAGE_SIZE, patch_size=16, **sizes),
        projection_dim=32)


def _save_clip_processor(root: Path, folder: Path) -> None:
    """CLIP's tokenizer (fast, ``tokenizer.json``, as the published folders ship it) and image processor."""
    from transformers import CLIPImageProcessor, CLIPProcessor, CLIPTokenizerFast

    tokenizer = clip_bpe_tokenizer(CLIPTokenizerFast, root / "clip-bpe")
    image_processor = CLIPImageProcessor(size={"shortest_edge": TINY_IMAGE_SIZE},
                                         crop_size={"height": TINY_IMAGE_SIZE, "width": TINY_IMAGE_SIZE})
    CLIPProcessor(image_processor=image_processor, tokenizer=tokenizer).save_pretrained(str(folder))


def _build_clip_transformers(folder: Path, seed: int) -> Path:
    from transformers import CLIPModel

    torch.manual_seed(seed)
    CLIPModel(_tiny_clip_config()).eval().save_pretrained(str(folder), safe_serialization=True)
    _save_clip_processor(folder.parent, folder)
    return folder


def build_aesthetic_head(root: Union[str, Path], embed_dim: int = 32, seed: int = 1) -> Path:
    """``sac+logos+ava1-l14-linearMSE.pth``: the published head widths (D,1024,128,64,16,1), D = ``embed_dim``."""
    from .heads import LinearHead

    torch.manual_seed(seed)
    head = LinearHead([embed_dim, 1024, 128, 64, 16, 1])
    path = Path(root) / "aesthetic" / "sac+logos+ava1-l14-linearMSE.pth"
    path.parent.mkdir(parents=True, exist_ok=True)
    save_whole(path, lambda file: torch.save(head.state_dict(), file))
    return path


def build_hpsv2(root: Union[str, Path], seed: int = 2) -> Path:
    """``HPS_v2.1_compressed.pt``: ``{'state_dict': ...}`` of a tiny hpsv2 open_clip CLIP."""
    root = Path(root)
    arch = register_tiny_hpsv2(root)
    hps_open_clip = import_hpsv2_open_clip()
    torch.manual_seed(seed)
    model = hps_open_clip.create_model(arch, pretrained=None, precision="fp32", device="cpu")
    path = root / "hpsv2" / "HPS_v2.1_compressed.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    save_whole(path, lambda file: torch.save({"state_dict": model.state_dict()}, file))
    return path


#: OpenAI CLIP's BPE: 256 byte tokens, their 256 word-final forms, 48894 merges, 2 specials (49408).
_CLIP_MERGES = 49152 - 256 - 2


def bytes_to_unicode() -> dict:
    """Byte-level BPE's table of the 256 bytes to printable characters (GPT-2's, which CLIP's BPE
    uses): printable Latin-1 bytes map to themselves, the rest to code points from 256 on. Kept here
    because transformers moved its copy (``tokenization_clip`` has none from 5.0)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("\xa1"), ord("\xac") + 1), *range(ord("\xae"), ord("\xff") + 1)]
    table, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            table[byte] = chr(byte)
        else:
            table[byte] = chr(256 + extra)
            extra += 1
    return table


def _synthetic_merges():
    """Stand-in merges of CLIP's size (pairs of byte tokens), where no package ships the real BPE:
    the vocabulary keeps CLIP's size and special ids, which is all a tiny random model needs."""
    chars = list(bytes_to_unicode().values())
    pairs = ((a, b) for a in chars for b in chars + [c + "</w>" for c in chars])
    return [f"{a} {b}" for _, (a, b) in zip(range(_CLIP_MERGES), pairs)]


def _clip_bpe_files(folder: Path) -> Tuple[Path, Path]:
    """vocab.json / merges.txt of OpenAI CLIP's BPE (laion's processor uses it), from the copy that
    open_clip, hpsv2 or OpenAI's clip ships, else stand-in merges of the same size."""
    import gzip

    bpe = bpe_vocab_file()
    if bpe is not None:
        lines = gzip.open(bpe).read().decode("utf-8").split("\n")
        merges = lines[1:_CLIP_MERGES + 1]
    else:
        merges = _synthetic_merges()
    byte_tokens = list(bytes_to_unicode().values())
    tokens = byte_tokens + [t + "</w>" for t in byte_tokens] + ["".join(m.split()) for m in merges]
    tokens += ["<|startoftext|>", "<|endoftext|>"]
    folder.mkdir(parents=True, exist_ok=True)
    vocab, merges_file = folder / "vocab.json", folder / "merges.txt"
    write_whole(vocab, json.dumps({t: i for i, t in enumerate(tokens)}))
    write_whole(merges_file, "#version: 0.2\n" + "\n".join(merges) + "\n")
    return vocab, merges_file


def clip_bpe_tokenizer(tokenizer_class, folder: Path):
    """A ``tokenizer_class`` (CLIPTokenizer or CLIPTokenizerFast) over the BPE files ``_clip_bpe_files``
    writes in ``folder``, read by ``from_pretrained``: the one way transformers 4 and 5 build the same
    vocabulary (4 takes ``vocab_file=``/``merges_file=``; 5 takes ``vocab=``/``merges=`` and, given
    the file names, builds a 2-token vocabulary that maps every word to <|endoftext|>). Its
    ``model_max_length`` is 77, as the published CLIP folders ship it."""
    _clip_bpe_files(folder)
    return tokenizer_class.from_pretrained(str(folder), pad_token="<|endoftext|>", model_max_length=77)


def build_pickscore(root: Union[str, Path], seed: int = 3) -> Tuple[Path, Path]:
    """(PickScore_v1-layout model folder, CLIP-ViT-H-14-laion processor-layout folder)."""
    from transformers import CLIPModel

    root = Path(root)
    model_dir, proc_dir = root / "PickScore_v1", root / "CLIP-ViT-H-14-laion2B-s32B-b79K"
    torch.manual_seed(seed)
    CLIPModel(_tiny_clip_config()).eval().save_pretrained(str(model_dir), safe_serialization=True)
    _save_clip_processor(root, proc_dir)
    return model_dir, proc_dir


_BERT_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def build_imagereward(root: Union[str, Path], seed: int = 4) -> Path:
    """Folder with ``ImageReward.pt``, ``med_config.json`` and a ``bert-base-uncased/`` tokenizer.

    ImageReward.pt holds ``blip.visual_encoder.*``, ``blip.text_encoder.*``, ``mlp.layers.*`` plus the
    BLIP projection heads the published file also carries (``blip.vision_proj``/``blip.text_proj``).
    """
    from .heads import LinearHead
    from .imagereward import import_blip_modules

    vit, med = import_blip_modules()
    folder = Path(root) / "ImageReward"
    (folder / "bert-base-uncased").mkdir(parents=True, exist_ok=True)
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)] + list("0123456789")
    words = ["a", "cat", "dog", "photo", "of", "the", "red", "blue", "car", "tree", "on", "in"]
    vocab = _BERT_SPECIALS + words + letters + ["##" + c for c in letters] + list(".,!?'-")
    (folder / "bert-base-uncased" / "vocab.txt").write_text("\n".join(vocab) + "\n")
    (folder / "bert-base-uncased" / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    # med_config.json: the published keys, tiny sizes; vocab 30524 = bert-base-uncased + [DEC] + [ENC].
    med_config = {
        "architectures": ["BertModel"], "attention_probs_dropout_prob": 0.1, "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1, "hidden_size": 64, "initializer_range": 0.02, "intermediate_size": 128,
        "layer_norm_eps": 1e-12, "max_position_embeddings": 64, "model_type": "bert", "num_attention_heads": 2,
        "num_hidden_layers": 1, "pad_token_id": 0, "type_vocab_size": 2, "vocab_size": 30524,
        "encoder_width": 64, "add_cross_attention": True,
    }
    (folder / "med_config.json").write_text(json.dumps(med_config, indent=2))
    torch.manual_seed(seed)
    config = med.BertConfig.from_json_file(str(folder / "med_config.json"))
    visual = vit.VisionTransformer(img_size=TINY_IMAGE_SIZE, patch_size=16, embed_dim=64, depth=1, num_heads=1)
    text = med.BertModel(config=config, add_pooling_layer=False)
    head = LinearHead([64, 1024, 128, 64, 16, 1])
    state = {f"blip.visual_encoder.{k}": v for k, v in visual.state_dict().items()}
    state.update({f"blip.text_encoder.{k}": v for k, v in text.state_dict().items()})
    state.update({f"mlp.{k}": v for k, v in head.state_dict().items()})
    state.update({"blip.vision_proj.weight": torch.randn(16, 64), "blip.vision_proj.bias": torch.zeros(16),
                  "blip.text_proj.weight": torch.randn(16, 64), "blip.text_proj.bias": torch.zeros(16)})
    save_whole(folder / "ImageReward.pt", lambda file: torch.save(state, file))
    return folder


def build_all(root: Union[str, Path], include_imagereward: bool = True) -> Tuple[Dict[str, Path], Dict[str, dict]]:
    """Every image reward's tiny checkpoint under ``root``: ``(checkpoints, options)`` by reward name."""
    root = Path(root)
    clip = build_clip(root)
    model_dir, proc_dir = build_pickscore(root)
    checkpoints = {"clip_t": clip, "hpsv2": build_hpsv2(root), "aesthetic": build_aesthetic_head(root),
                   "pickscore": model_dir}
    options = {"clip_t": {"model_name": TINY_CLIP_ARCH},
               "hpsv2": {"arch": TINY_HPS_ARCH},
               "aesthetic": {"model_name": TINY_CLIP_ARCH, "clip_checkpoint": clip},
               "pickscore": {"processor": proc_dir}}
    if include_imagereward:
        checkpoints["imagereward"] = build_imagereward(root)
        options["imagereward"] = {}
    return checkpoints, options
