"""Stub of magi_attention.api.flex_flash_attn_func (SandAI-org/MagiAttention; own code, written from
its documented semantics).

flex_flash_attn_func(q, k, v, q_ranges, k_ranges, attn_type_map, max_seqlen_q=None, ...)
    q [T, Hq, D], k/v [T, Hk, D] (GQA as FA3); q_ranges, k_ranges [P, 2] int32 half-open token
    ranges; attn_type_map [P] int32, 0 = full (the only type the refiner uses, asserted). Row i of q
    attends to the union of k_ranges[p] over every pair p whose q range holds i (the refiner's
    pairs never overlap for one query, so union = sum); a query row with no key gets zeros.
    Math: S = scale * q k^T with scale = 1/sqrt(D), fp32 softmax over the allowed keys, fp32 P V,
    one rounding of the output to q.dtype (what the FFA kernel produces up to accumulation order).
    Returns (out [T, Hq, D], meta) with meta.lse [T, Hq] fp32 (natural log, -inf for no keys).
"""

from types import SimpleNamespace

import torch


def flex_flash_attn_func(q, k, v, q_ranges, k_ranges, attn_type_map=None, max_seqlen_q=None,
                         auto_range_merge=False, sparse_load=False, softmax_scale=None, **kw):
    if attn_type_map is not None:
        assert int(attn_type_map.abs().sum()) == 0, "stub supports full (type 0) ranges only"
    t, hq, d = q.shape
    hk = k.shape[1]
    scale = softmax_scale if softmax_scale is not None else d ** -0.5
    allowed = torch.zeros(t, k.shape[0], dtype=torch.bool)
    for (qs, qe), (ks, ke) in zip(q_ranges.tolist(), k_ranges.tolist()):
        allowed[qs:qe, ks:ke] = True
    if hq != hk:
        k = k.repeat_interleave(hq // hk, dim=1)
        v = v.repeat_interleave(hq // hk, dim=1)
    s = torch.einsum("qhd,khd->hqk", q.float(), k.float()) * scale
    s = s.masked_fill(~allowed[None], float("-inf"))
    lse = torch.logsumexp(s, dim=-1)  # [H, T]
    p = torch.exp(s - lse.unsqueeze(-1)).nan_to_num(0.0)
    out = torch.einsum("hqk,khd->qhd", p, v.float()).to(q.dtype)
    return out, SimpleNamespace(lse=lse.transpose(0, 1).contiguous())


__all__ = ["flex_flash_attn_func"]
