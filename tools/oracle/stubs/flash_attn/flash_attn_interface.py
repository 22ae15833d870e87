"""Stub of flash_attn.flash_attn_interface.flash_attn_func (FlashAttention-2 2.x, batched layout).

flash_attn_func(q, k, v, softmax_scale=None, causal=False, return_attn_probs=False)
    q [B, Sq, Hq, D], k/v [B, Sk, Hk, D] (GQA: kv head j serves q heads [j*G, (j+1)*G)).
    Exact non-causal attention with fp32 math (flash_attn_interface stub's attention_fwd), one
    rounding of the output to q.dtype. Returns out, or (out, lse [B, Hq, Sq] fp32, None) when
    return_attn_probs (the official refiner's fallback path reads the lse to merge key ranges).
"""

from flash_attn_interface import attention_fwd


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, return_attn_probs=False, **kw):
    assert dropout_p == 0.0 and not causal
    out, lse = attention_fwd(q, k, v, softmax_scale=softmax_scale)
    if return_attn_probs:
        return out, lse, None
    return out


__all__ = ["flash_attn_func"]
