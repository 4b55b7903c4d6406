"""Reusable building blocks: attention, rotary positions, masked pooling, MLPs."""
from longtext_jax.layers.attention import MultiHeadAttention
from longtext_jax.layers.attention import padding_mask
from longtext_jax.layers.mlp import Mlp
from longtext_jax.layers.pooling import masked_max
from longtext_jax.layers.pooling import masked_mean
from longtext_jax.layers.pooling import masked_sum
from longtext_jax.layers.pooling import pool
from longtext_jax.layers.rotary import apply_rotary

__all__ = [
    "MultiHeadAttention", "padding_mask", "Mlp", "masked_max", "masked_mean",
    "masked_sum", "pool", "apply_rotary",
]
