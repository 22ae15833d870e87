"""Stub of flash_attn.layers.rotary.apply_rotary_emb (FlashAttention-2 2.x).

apply_rotary_emb(x, cos, sin, interleaved=False, inplace=False)
    x [B, S, H, D]; cos, sin [S, R/2] with R <= D the rotated width. Non-interleaved (GPT-NeoX)
    rotation of the first R dims, the rest passed through:
        x1 = x[..., :R/2], x2 = x[..., R/2:R]
        out[..., :R/2]  = x1 * cos - x2 * sin
        out[..., R/2:R] = x1 * sin + x2 * cos
    computed in fp32 (the Triton kernel loads fp32 for fp32 inputs), returned in x.dtype.
    cos/sin broadcast over batch and heads. Interleaved mode and in-place are not supported.
"""

import torch


def apply_rotary_emb(x, cos, sin, interleaved=False, inplace=False, seqlen_offsets=0, cu_seqlens=None,
                     max_seqlen=None):
    assert not interleaved and not inplace and cu_seqlens is None and seqlen_offsets == 0
    half = cos.shape[-1]
    rd = 2 * half
    assert rd <= x.shape[-1]
    xf = x.float()
    c = cos[: x.shape[1]].float()[None, :, None, :]
    s = sin[: x.shape[1]].float()[None, :, None, :]
    x1, x2 = xf[..., :half], xf[..., half:rd]
    out = torch.cat([x1 * c - x2 * s, x1 * s + x2 * c, xf[..., rd:]], dim=-1)
    return out.to(x.dtype)


__all__ = ["apply_rotary_emb"]
