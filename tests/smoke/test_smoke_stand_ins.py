"""The smoke harness on the GPU machine's stack (transformers 5, accelerate 1.15) as on upstream's
(transformers 4, accelerate 1.0-1.4): each check runs in this environment and in the GPU check's
rehearsal environment (``scripts/gpu_rehearse_env.sh --cached``; skipped where it is not built yet).

- accelerate on the CPU stand-in wraps the model in DDP on 2 processes and averages gradients, as it
  does on 2 GPUs (1.15 picks MULTI_CPU only when told the run is on the CPU);
- the tiny CLIP and Qwen2 tokenizers keep the prompt (transformers 5 ignored ``vocab_file=`` and
  built a 2-token vocabulary: every word <|endoftext|>);
- FlowGRPO's float prompt ids decode as transformers 4's slow tokenizers decode them."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from free_port import free_port
from upstream_snapshots import missing

REPO = Path(__file__).resolve().parents[2]
PROMPT = "a red circle on the sea"
#: diffusers 0.35's QwenImagePipeline prompt template and the number of its tokens encode_prompt drops
QWEN_TEMPLATE = ("<|im_start|>system\nDescribe the image by detailing the color, shape, size, texture, quantity, "
                 "text, spatial relationships of the objects and background:<|im_end|>\n<|im_start|>user\n{}"
                 "<|im_end|>\n<|im_start|>assistant\n")
QWEN_DROPPED = 34


def rehearsal_python():
    found = subprocess.run([str(REPO / "scripts" / "gpu_rehearse_env.sh"), "--cached"], capture_output=True, text=True)
    if found.returncode != 0:
        missing(f"the rehearsal environment is not built here ({found.stderr.strip()[-200:]}): "
                    "scripts/gpu_check.sh --rehearse builds it")
    return found.stdout.strip().splitlines()[-1]


@pytest.fixture(params=["this environment", "the rehearsal's"])
def python(request):
    return sys.executable if request.param == "this environment" else rehearsal_python()


def environment(**extra):
    return {**os.environ, "PYTHONPATH": str(REPO), "PYTHONNOUSERSITE": "1", "OMP_NUM_THREADS": "1", **extra}


def run_json(python, body, *args):
    script = "import json, sys\n" + textwrap.dedent(body)
    done = subprocess.run([python, "-c", script, *args], capture_output=True, text=True, env=environment(), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_tiny_tokenizers_keep_the_prompt(python, tmp_path):
    result = run_json(python, '''
        from pathlib import Path
        import numpy as np, transformers
        from transformers import CLIPTokenizer
        from otca_patch.tiny_models.text import clip_tokenizer
        from otca_patch.tiny_models.qwenimage import byte_level_tokenizer
        folder, prompt, template, dropped = Path(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
        clip = clip_tokenizer(folder / "clip")
        # upstream's call (FlowGRPO train_flux*.py eval / sampling)
        ids = clip([prompt], padding="max_length", max_length=256, truncation=True).input_ids[0]
        clip.save_pretrained(str(folder / "clip-saved"))
        reloaded = CLIPTokenizer.from_pretrained(str(folder / "clip-saved"))
        qwen = byte_level_tokenizer(folder / "qwen")
        kept = qwen(template.format(prompt)).input_ids[dropped:]
        print(json.dumps({"transformers": transformers.__version__, "size": len(clip), "max": clip.model_max_length,
                          "ids": ids, "reloaded": reloaded([prompt], padding="max_length", max_length=256,
                                                           truncation=True).input_ids[0],
                          "decoded": clip.batch_decode(np.array([ids]), skip_special_tokens=True),
                          "qwen_prompt": qwen(prompt).input_ids, "qwen_kept": qwen.decode(kept)}))
        ''', str(tmp_path), PROMPT, QWEN_TEMPLATE, str(QWEN_DROPPED))
    assert result["size"] == 49408 and result["max"] == 77 and isinstance(result["max"], int)
    ids = result["ids"]
    assert len(ids) == 256 and ids[0] == 49406 and result["reloaded"] == ids
    words = ids[1:ids.index(49407)]  # up to the first <|endoftext|> (CLIP's unk, eos and pad)
    assert len(words) >= len(PROMPT.split())
    assert set(ids[1 + len(words):]) == {49407}
    assert result["decoded"] == [PROMPT]
    # every byte one token: its index among the sorted byte-level symbols (GPT-2's table, recomputed here)
    from tokenizers.pre_tokenizers import ByteLevel

    from otca_patch.rewards.tiny import bytes_to_unicode

    symbols = sorted(ByteLevel.alphabet())
    assert result["qwen_prompt"] == [symbols.index(bytes_to_unicode()[byte]) for byte in PROMPT.encode()]
    assert f"user\n{PROMPT}<|im_end|>" in result["qwen_kept"]


def test_whole_number_float_ids_decode_as_on_transformers_4(python, tmp_path):
    """FlowGRPO's Kontext and Qwen-Image loops decode ``gather(prompt_ids).float().cpu().numpy()``."""
    result = run_json(python, '''
        from pathlib import Path
        import numpy as np, torch, transformers
        from transformers.tokenization_utils_base import PreTrainedTokenizerBase
        from otca_patch.stand_ins.cpu import decode_float_ids_as_transformers_4
        from otca_patch.tiny_models.text import clip_tokenizer
        from otca_patch.tiny_models.qwenimage import byte_level_tokenizer
        native = PreTrainedTokenizerBase.decode
        decode_float_ids_as_transformers_4()
        decode_float_ids_as_transformers_4()  # installing twice wraps once
        wrapped = PreTrainedTokenizerBase.decode
        out = {"major": int(transformers.__version__.split(".")[0]), "wrapped": wrapped is not native,
               "once": getattr(wrapped, "__wrapped__", native) is native}
        folder, prompt = Path(sys.argv[1]), sys.argv[2]
        for name, tokenizer in (("clip", clip_tokenizer(folder / "clip")), ("qwen", byte_level_tokenizer(folder / "qwen"))):
            ids = tokenizer([prompt, prompt], padding="max_length", max_length=40, truncation=True).input_ids
            out[name] = [tokenizer.batch_decode(np.array(ids, dtype=np.float32), skip_special_tokens=True),
                         tokenizer.batch_decode(torch.tensor(ids, dtype=torch.float32), skip_special_tokens=True),
                         tokenizer.batch_decode(np.array(ids), skip_special_tokens=True)]
            try:
                tokenizer.batch_decode(np.array(ids, dtype=np.float32) + 0.5)
                out[name + "_fraction"] = "decoded"
            except (TypeError, ValueError, OverflowError) as exc:
                out[name + "_fraction"] = type(exc).__name__
        print(json.dumps(out))
        ''', str(tmp_path), PROMPT)
    for name in ("clip", "qwen"):
        assert result[name] == [[PROMPT, PROMPT]] * 3
    assert result["wrapped"] == (result["major"] >= 5) and result["once"]
    if result["major"] >= 5:  # ids that are not whole numbers still fail as transformers 5 fails them
        assert result["clip_fraction"] != "decoded" and result["qwen_fraction"] != "decoded"


DDP_WORKER = textwrap.dedent("""
    import json, os, sys, torch
    from otca_patch.stand_ins.cpu import accelerate_as_on_gpus
    accelerate_as_on_gpus()
    from accelerate import Accelerator
    accelerator = Accelerator()
    model = accelerator.prepare(torch.nn.Linear(2, 1))
    rank = accelerator.process_index
    model(torch.full((1, 2), float(rank + 1))).sum().backward()
    inner = model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model
    # a file per rank: two ranks printing to torchrun's one stdout can interleave their lines under load
    with open(f"rank{rank}.json", "w") as out:
        json.dump({"rank": rank, "ddp": inner is not model, "processes": accelerator.num_processes,
                   "type": str(accelerator.distributed_type), "grad": inner.weight.grad.tolist()}, out)
    # both ranks end the gloo group together: one rank leaving while the other still talks to it can abort
    accelerator.wait_for_everyone()
    torch.distributed.destroy_process_group()
""")


def test_accelerate_wraps_in_ddp_on_two_cpu_processes_as_on_two_gpus(python, tmp_path):
    worker = tmp_path / "worker.py"
    worker.write_text(DDP_WORKER)
    done = subprocess.run([python, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
                           "--master_port", str(free_port()), str(worker)], capture_output=True, text=True,
                          env=environment(OTCA_SMOKE_DEVICE="cpu"), timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    assert [r["rank"] for r in ranks] == [0, 1]
    for rank in ranks:
        assert rank["ddp"] and rank["processes"] == 2 and rank["type"].endswith("MULTI_CPU")
        # d(sum(W x + b))/dW = x: rank 0 fed 1s, rank 1 fed 2s; DDP leaves their mean on both
        assert rank["grad"][0] == pytest.approx([1.5, 1.5], abs=1e-6)


def test_the_accelerate_stand_in_leaves_one_process_and_the_gpu_alone(monkeypatch):
    import torch

    from otca_patch.stand_ins import cpu as smoke_environment

    monkeypatch.delenv("ACCELERATE_USE_CPU", raising=False)
    monkeypatch.setenv("WORLD_SIZE", "1")  # one GPU: accelerate does not wrap; MULTI_CPU would
    smoke_environment.accelerate_as_on_gpus()
    assert "ACCELERATE_USE_CPU" not in os.environ
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(smoke_environment, "smoke_device", lambda: torch.device("cuda", 0))
    smoke_environment.accelerate_as_on_gpus()
    assert "ACCELERATE_USE_CPU" not in os.environ  # on GPUs accelerate's own choice stands
