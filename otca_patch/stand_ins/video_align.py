"""DanceGRPO's video trainers on the CPU: VideoAlign's reward and the flash-attention kernel of
upstream's HunyuanVideo transformer, replaced at their smallest boundaries.
- ``flash_attn_no_pad`` (CUDA only): ``masked_attention``, the same padded-key attention through
  ``scaled_dot_product_attention``;
- VideoAlign's ``inferencer.reward(paths, prompts, use_norm=True)`` (a Qwen2-VL model, GPU-sized):
  ``StubVideoAlign`` re-reads each mp4 upstream wrote and returns deterministic VQ, MQ and TA from
  its pixels and its prompt, in VideoAlign's return format.
"""
from __future__ import annotations

import zlib

from torch.nn import functional as F


def masked_attention(qkv, key_padding_mask, causal=False, dropout_p=0.0, softmax_scale=None):
    """``flash_attn_no_pad`` on the CPU: qkv ``[B, S, 3, H, D]``, key_padding_mask ``[B, S]`` (True =
    token) -> ``[B, S, H, D]``; padded queries give zeros, as flash-attn's ``pad_input`` leaves them."""
    if causal or dropout_p:
        raise NotImplementedError("masked_attention covers the non-causal, dropout-free call upstream makes")
    query, key, value = (t.transpose(1, 2) for t in qkv.unbind(2))
    mask = key_padding_mask.bool()
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask[:, None, None, :], scale=softmax_scale)
    return out.transpose(1, 2) * mask[:, :, None, None].to(out.dtype)



class StubVideoAlign:
    """VideoAlign's ``reward`` interface, scoring the mp4 upstream wrote from its pixels."""

    def reward(self, video_paths, prompts, fps=None, num_frames=None, max_pixels=None, use_norm=True):
        import cv2
        import numpy as np

        results = []
        for path, prompt in zip(video_paths, prompts):
            capture, frames = cv2.VideoCapture(path), []
            while True:
                ok, frame = capture.read()
                if not ok:
                    break
                frames.append(frame[..., ::-1].astype(np.float64) / 255.0)  # BGR -> RGB
            capture.release()
            if not frames:
                raise RuntimeError(f"stub VideoAlign: cannot read {path}")
            video = np.stack(frames)  # [F, H, W, 3]
            channel = zlib.crc32(prompt.encode()) % 3  # the prompt's "colour": stable across processes
            vq = 4.0 * video.std() - 1.0
            mq = 20.0 * np.abs(np.diff(video, axis=0)).mean() if len(video) > 1 else 0.0
            ta = 4.0 * (video[..., channel].mean() - video.mean())
            results.append({"VQ": float(vq), "MQ": float(mq), "TA": float(ta)})
        for result in results:
            result["Overall"] = result["VQ"] + result["MQ"] + result["TA"]
        return results
