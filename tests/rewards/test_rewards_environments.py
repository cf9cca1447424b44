"""The CLIP-based rewards in the trainers' own environments, simulated by hiding packages.

DanceGRPO's environment has hpsv2 (its vendored open_clip) but no open_clip; FlowGRPO's has
neither. Each case runs in a subprocess whose import system refuses the hidden packages, and
compares the scores with a reference computed here, through the libraries the dev venv has.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from otca_patch.rewards import clip_libs, load, tiny
from otca_patch.rewards.packages import missing_package
from upstream_snapshots import missing

REPO = Path(__file__).resolve().parents[2]
PROMPTS = ["a photo of a cat", "a red car on the road"]

_HIDE = '''
import importlib.abc, json, sys
HIDDEN = set(json.loads(sys.argv[1]))
class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in HIDDEN:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Hide())
'''


def run_hidden(hidden, body: str, *args: str) -> dict:
    """Run ``body`` (prints one JSON line last) with the packages ``hidden`` unimportable."""
    code = _HIDE + textwrap.dedent(body)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
               OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-c", code, json.dumps(list(hidden)), *args], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def pixels(seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (2, 3, tiny.TINY_IMAGE_SIZE, tiny.TINY_IMAGE_SIZE), generator=g).float() / 255


SCORE = '''
import torch
from otca_patch.rewards import clip_libs, load, tiny
root = sys.argv[2]
clip = tiny.build_clip(root)
head = tiny.build_aesthetic_head(root)
g = torch.Generator().manual_seed(0)
x = torch.randint(0, 256, (2, 3, tiny.TINY_IMAGE_SIZE, tiny.TINY_IMAGE_SIZE), generator=g).float() / 255
prompts = ["a photo of a cat", "a red car on the road"]
clip_t = load("clip_t", checkpoint=clip, model_name=tiny.TINY_CLIP_ARCH)
aesthetic = load("aesthetic", checkpoint=head, clip_checkpoint=clip, model_name=tiny.TINY_CLIP_ARCH)
print(json.dumps({"library": clip_libs.open_clip_name(), "checkpoint": str(clip),
                  "clip_t": clip_t.score(x, prompts).tolist(), "aesthetic": aesthetic.score(x, prompts).tolist()}))
'''


def test_without_open_clip_clip_rewards_use_hpsv2s_copy_and_score_as_open_clip_does(tmp_path):
    """DanceGRPO's environment: the same checkpoint file, scored through hpsv2.src.open_clip, gives
    open_clip's scores."""
    hidden = run_hidden(["open_clip"], SCORE, str(tmp_path))
    assert hidden["library"] == clip_libs.HPSV2_OPEN_CLIP
    assert hidden["checkpoint"].endswith("open_clip_model.safetensors")
    clip_t = load("clip_t", checkpoint=hidden["checkpoint"], model_name=tiny.register_tiny_open_clip(tmp_path))
    head = tmp_path / "aesthetic" / "sac+logos+ava1-l14-linearMSE.pth"
    aesthetic = load("aesthetic", checkpoint=head, clip_checkpoint=hidden["checkpoint"], model_name=tiny.TINY_CLIP_ARCH)
    assert clip_libs.open_clip_name() == clip_libs.OPEN_CLIP  # the reference: open_clip itself
    assert torch.allclose(torch.tensor(hidden["clip_t"]), clip_t.score(pixels(0), PROMPTS), atol=1e-5)
    assert torch.allclose(torch.tensor(hidden["aesthetic"]), aesthetic.score(pixels(0), PROMPTS), atol=1e-5)


def test_without_any_open_clip_the_tiny_clip_is_a_transformers_folder_scored_by_clipmodel(tmp_path):
    """FlowGRPO's environment: neither open_clip nor hpsv2; CLIP-T is the cosine of CLIPModel's
    image and text features, recomputed here through CLIPProcessor."""
    from transformers import CLIPModel, CLIPProcessor

    hidden = run_hidden(["open_clip", "hpsv2", "clip"], SCORE, str(tmp_path))
    assert hidden["library"] is None
    folder = Path(hidden["checkpoint"])
    assert folder.is_dir() and (folder / "config.json").is_file()
    model = CLIPModel.from_pretrained(str(folder), local_files_only=True).eval()
    processor = CLIPProcessor.from_pretrained(str(folder), local_files_only=True)
    with torch.no_grad():
        img = model.get_image_features(**processor(images=list(pixels(0)), return_tensors="pt", do_rescale=False))
        txt = model.get_text_features(**processor(text=PROMPTS, padding=True, return_tensors="pt"))
    expected = torch.nn.functional.cosine_similarity(img, txt, dim=-1)
    assert torch.allclose(torch.tensor(hidden["clip_t"]), expected, atol=1e-5)
    assert len(hidden["aesthetic"]) == 2


MISSING = '''
from otca_patch.rewards import load
from otca_patch.rewards.packages import missing_package
lines = {}
for name, kwargs in (("clip_t", {"checkpoint": sys.argv[2]}), ("hpsv2", {"checkpoint": sys.argv[2]})):
    try:
        load(name, **kwargs)
        lines[name] = None
    except ImportError as exc:
        lines[name] = [type(exc).__name__, str(exc), missing_package(name, sys.argv[2])]
print(json.dumps(lines))
'''


def test_a_missing_library_is_one_line_naming_the_package_and_the_extra(tmp_path):
    checkpoint = tmp_path / "open_clip_model.safetensors"
    checkpoint.write_bytes(b"")
    lines = run_hidden(["open_clip", "hpsv2", "clip"], MISSING, str(checkpoint))
    for name, package in (("clip_t", "open_clip_torch"), ("hpsv2", "hpsv2")):
        kind, message, preflight = lines[name]
        assert kind == "MissingPackage" and "\n" not in message
        assert package in message and "pip install 'otca-patch[rewards]'" in message
        assert preflight and package in preflight and "\n" not in preflight
    # where the library is there, nothing is reported; a transformers folder never needs open_clip
    assert missing_package("clip_t", str(checkpoint)) is None
    assert missing_package("clip_t", str(tmp_path)) is None


def test_hpsv2_without_its_vocabulary_and_no_copy_says_so_in_one_line(tmp_path):
    """A PyPI hpsv2 wheel (no tokenizer vocabulary) where no other package ships the file."""
    (tmp_path / "hpsv2" / "src" / "open_clip").mkdir(parents=True)
    for folder in ("hpsv2", "hpsv2/src", "hpsv2/src/open_clip"):
        (tmp_path / folder / "__init__.py").write_text("")
    body = '''
    sys.path.insert(0, sys.argv[2])
    from otca_patch.rewards import clip_libs
    try:
        clip_libs.import_hpsv2_open_clip()
        print(json.dumps(None))
    except clip_libs.MissingPackage as exc:
        print(json.dumps(str(exc)))
    '''
    message = run_hidden(["open_clip", "clip"], body, str(tmp_path))
    assert "\n" not in message and "vocabulary" in message and "otca-patch[rewards]" in message


def test_clip_tokenizer_without_a_bpe_file_keeps_clips_size_and_special_ids(tmp_path):
    body = '''
    from otca_patch.rewards import clip_libs
    from otca_patch.tiny_models.text import clip_tokenizer
    tokenizer = clip_tokenizer(sys.argv[2])
    ids = tokenizer(["a photo of a cat"])["input_ids"][0]
    print(json.dumps({"bpe": clip_libs.bpe_vocab_file(), "size": len(tokenizer), "ids": ids}))
    '''
    result = run_hidden(["open_clip", "hpsv2", "clip"], body, str(tmp_path))
    assert result["bpe"] is None and result["size"] == 49408
    assert result["ids"][0] == 49406 and result["ids"][-1] == 49407 and len(result["ids"]) > 2


def test_worker_stops_before_the_script_when_a_reward_library_is_missing(tmp_path):
    """`otca-patch run` with a reward this environment cannot load: exit 2, one line, script not run."""
    script = tmp_path / "train.py"
    script.write_text("open('ran', 'w').write('yes')\n")
    checkpoint = tmp_path / "open_clip_model.safetensors"
    checkpoint.write_bytes(b"")
    body = '''
    import contextlib, io, os
    from otca_patch.launch.worker import main
    os.chdir(os.path.dirname(sys.argv[2]))
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main([sys.argv[2], "--otca", "--otca_rewards", "clip_t", "--otca_reward_ckpt", "clip_t=" + sys.argv[3]])
    print(json.dumps({"code": code, "stderr": err.getvalue()}))
    '''
    result = run_hidden(["open_clip", "hpsv2", "clip"], body, str(script), str(checkpoint))
    assert result["code"] == 2 and not (tmp_path / "ran").exists()
    lines = result["stderr"].strip().splitlines()
    assert len(lines) == 1 and "open_clip_torch" in lines[0] and "otca-patch[rewards]" in lines[0]


def test_hpsv2s_vocabulary_is_copied_whole_under_its_own_name(tmp_path, monkeypatch):
    """The copy lands under a private name and is renamed into place, so a rank that arrives while
    another copies sees the whole file or none, and nothing partial is left behind."""
    from otca_patch.rewards import clip_libs

    source = clip_libs.bpe_vocab_file()
    if source is None:
        missing("no installed package ships CLIP's BPE vocabulary")
    (tmp_path / "src" / "open_clip").mkdir(parents=True)
    found = clip_libs._package_dir
    monkeypatch.setattr(clip_libs, "_package_dir", lambda name: tmp_path if name == "hpsv2" else found(name))
    monkeypatch.setattr(clip_libs.importlib, "import_module", lambda name: name)
    assert clip_libs.import_hpsv2_open_clip() == clip_libs.HPSV2_OPEN_CLIP
    folder = tmp_path / "src" / "open_clip"
    assert (folder / clip_libs.BPE_VOCAB).read_bytes() == Path(source).read_bytes()
    assert [p.name for p in folder.iterdir()] == [clip_libs.BPE_VOCAB]
