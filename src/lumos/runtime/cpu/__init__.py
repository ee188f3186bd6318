"""The CPU runtime: generated C kernels, one foreign call per execute."""

from lumos.runtime.cpu.cc import CompileError
from lumos.runtime.cpu.isolate import CandidateError, Sandbox, run_candidate
from lumos.runtime.cpu.program import CompiledProgram, CpuProgram, CpuRuntime, build

__all__ = ["CandidateError", "CompileError", "CompiledProgram", "CpuProgram", "CpuRuntime",
           "Sandbox", "build", "run_candidate"]
