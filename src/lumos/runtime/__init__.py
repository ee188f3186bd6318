"""Runtimes: where a compiled program runs."""

from lumos.runtime.base import Program, Runtime
from lumos.runtime.cpu import CpuRuntime
from lumos.runtime.reference import ReferenceRuntime

__all__ = ["CpuRuntime", "Program", "ReferenceRuntime", "Runtime"]
