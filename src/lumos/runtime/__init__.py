"""Runtimes: where a compiled program runs."""

from lumos.runtime.base import Program, Runtime
from lumos.runtime.reference import ReferenceRuntime

__all__ = ["Program", "ReferenceRuntime", "Runtime"]
