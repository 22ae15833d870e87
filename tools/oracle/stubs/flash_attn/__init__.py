"""Stub package for FlashAttention-2 (`flash_attn`), imported by inference/model/magi2_refiner.py.

Provides flash_attn.layers.rotary.apply_rotary_emb (the RoPE the refiner applies to q and k) and
flash_attn.flash_attn_interface.flash_attn_func (the dense / fallback attention). Semantics: module
docstrings; own code written from the FlashAttention-2 documentation, no code copied.
"""
