"""Modules that build graphs, with named parameters bound from weight files."""

from lumos.nn.layers import (
    AdaptiveAvgPool2d,
    Attention,
    AvgPool2d,
    BatchNorm2d,
    Conv1d,
    Conv2d,
    Embedding,
    GeluMLP,
    KVCache,
    LayerNorm,
    Linear,
    MaxPool2d,
    RMSNorm,
    RotaryEmbedding,
    SwiGLU,
    causal_bias,
)
from lumos.nn.module import Module, ModuleList, Param, carries, carry_over, load_state
from lumos.nn.quant import FORMATS, Packed, dequantize

__all__ = ["FORMATS", "AdaptiveAvgPool2d", "Attention", "AvgPool2d", "BatchNorm2d", "Conv1d",
           "Conv2d", "Embedding", "GeluMLP", "KVCache", "LayerNorm", "Linear", "MaxPool2d",
           "Module", "ModuleList", "Packed", "Param", "RMSNorm", "RotaryEmbedding", "SwiGLU",
           "carries", "carry_over", "causal_bias", "dequantize", "load_state"]
