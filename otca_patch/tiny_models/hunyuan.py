"""Tiny HunyuanVideo models: upstream's own transformer (``fastvideo.models.hunyuan_hf``, its flash-attention
kernel replaced by ``stand_ins.video_align.masked_attention``) and diffusers' ``AutoencoderKLHunyuanVideo``
(what upstream's ``load_vae("hunyuan_hf")`` builds), in tiny configs."""
from __future__ import annotations


def hunyuan_transformer(in_channels: int = 16):
    """Upstream's HunyuanVideo transformer, tiny; ``in_channels=32`` is the image-to-video layout
    (noise latents and first-frame latents concatenated on the channels)."""
    import fastvideo.models.hunyuan_hf.modeling_hunyuan as modeling

    from ..stand_ins.video_align import masked_attention

    modeling.flash_attn_no_pad = masked_attention
    return modeling.HunyuanVideoTransformer3DModel(
        in_channels=in_channels, out_channels=16, num_attention_heads=2, attention_head_dim=16, num_layers=1,
        num_single_layers=1, num_refiner_layers=1, text_embed_dim=32, pooled_projection_dim=16, rope_axes_dim=(4, 6, 6))


def hunyuan_vae():
    from diffusers import AutoencoderKLHunyuanVideo

    return AutoencoderKLHunyuanVideo(
        in_channels=3, out_channels=3, latent_channels=16, down_block_types=("HunyuanVideoDownBlock3D",) * 4,
        up_block_types=("HunyuanVideoUpBlock3D",) * 4, block_out_channels=(8, 8, 8, 8), layers_per_block=1,
        norm_num_groups=4, temporal_compression_ratio=4, mid_block_add_attention=False)
