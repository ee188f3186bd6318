"""Weight files: safetensors (memory-mapped), GGUF (quantized tensors kept packed) and
Hugging Face model folders."""

from lumos.io.errors import WeightError
from lumos.io.gguf import GGUFFile
from lumos.io.hf import HFFolder
from lumos.io.safetensors import SafeTensors

__all__ = ["GGUFFile", "HFFolder", "SafeTensors", "WeightError"]
