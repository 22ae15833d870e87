"""Stub package for MagiAttention (`magi_attention`): only magi_attention.api.flex_flash_attn_func,
the block-sparse (range-list) attention the refiner's window layers call on Hopper. See api.py."""
