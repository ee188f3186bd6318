"""`lumos info`: what lumos sees of this machine (CPU, ISA features, caches, memory, the C
compiler, BLAS, a CUDA device) and of its caches; `--bandwidth` measures copy bandwidth,
`--clear` empties the artifact, kernel, joined-weight and search-verdict caches."""

from __future__ import annotations

import argparse
import ctypes
import os
import platform
import shutil
import subprocess
from pathlib import Path

from lumos.paths import cache_root
from lumos.search.verdicts import FILE as VERDICTS
from lumos.search.verdicts import stored

# x86 flags of /proc/cpuinfo lumos' kernels (or its compiler under -march=native) can use
X86_FEATURES = (("sse4_2", "SSE4.2"), ("avx", "AVX"), ("avx2", "AVX2"), ("fma", "FMA"),
                ("f16c", "F16C"), ("avx512f", "AVX-512F"), ("avx512bw", "AVX-512BW"),
                ("avx512vl", "AVX-512VL"), ("avx512_vnni", "AVX-512 VNNI"),
                ("avx_vnni", "AVX-VNNI"), ("avx512_bf16", "AVX-512 BF16"),
                ("avx512_fp16", "AVX-512 FP16"), ("amx_tile", "AMX-TILE"),
                ("amx_bf16", "AMX-BF16"), ("amx_int8", "AMX-INT8"))
ARM_FEATURES = (("asimd", "NEON"), ("asimddp", "DotProd"), ("sve", "SVE"), ("sve2", "SVE2"),
                ("bf16", "BF16"), ("i8mm", "I8MM"), ("sme", "SME"))
# under $LUMOS_CACHE: saved choices, kernels, shipped kernels, weight files joined from
# chunk packages (lumos.models.packages.assembled)
CACHES = ("artifacts", "cpu", "shipped", "weights")
_ENTRY = {"artifacts": ".lar", "weights": ".gguf"}  # what an entry is (else a library)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("info", help="this machine as lumos sees it, and its caches")
    p.add_argument("--bandwidth", action="store_true",
                   help="also measure memory copy bandwidth (about a second)")
    p.add_argument("--clear", action="store_true",
                   help="delete the artifact, compiled-kernel, joined-weight and "
                        "search-verdict caches")


def cpuinfo() -> dict[str, str]:
    """The first value of each key of /proc/cpuinfo ({} where there is none)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        out.setdefault(key.strip(), value.strip())
    return out


def features(info: dict[str, str]) -> tuple[list[str], list[str]]:
    """(present, absent) ISA features by their usual names."""
    flags = set((info.get("flags") or info.get("Features") or "").split())
    table = ARM_FEATURES if "Features" in info and "flags" not in info else X86_FEATURES
    return ([name for f, name in table if f in flags],
            [name for f, name in table if f not in flags])


def physical_cores() -> int | None:
    """Distinct (package, core) pairs of /proc/cpuinfo; None where it does not say."""
    try:
        blocks = Path("/proc/cpuinfo").read_text().split("\n\n")
    except OSError:
        return None
    pairs = set()
    for b in blocks:
        kv = dict((k.strip(), v.strip()) for k, _, v in (ln.partition(":") for ln in
                                                          b.splitlines()))
        if "core id" in kv:
            pairs.add((kv.get("physical id"), kv["core id"]))
    return len(pairs) or None


def caches() -> list[str]:
    """CPU 0's caches: 'L1d 48K', ..., each with the CPUs that share it."""
    out = []
    for d in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            level, kind, size, shared = ((d / f).read_text().strip() for f in
                                         ("level", "type", "size", "shared_cpu_list"))
        except OSError:
            continue
        tag = {"Data": "d", "Instruction": "i"}.get(kind, "")
        out.append(f"L{level}{tag} {size} (CPUs {shared})")
    return out


def memory() -> str | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return f"{int(line.split()[1]) / 2**20:.1f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    return None


def huge_pages() -> str:
    """Transparent huge pages as Linux offers them: the weights and arenas of CPU programs
    ask for them (runtime/cpu/memory.py); without them a decode step is ~30% slower."""
    try:
        text = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return "not offered here (no transparent huge pages)"
    mode = text[text.find("[") + 1:text.find("]")] if "[" in text else text.strip()
    if mode == "never":
        return ("off (never): weights and arenas on 4 KiB pages, decoding ~30% slower; "
                "`echo madvise > /sys/kernel/mm/transparent_hugepage/enabled` turns them on")
    return f"{mode}: weights and arenas of CPU programs on 2 MiB pages"


def openblas() -> str:
    """lumos' BLAS (scipy-openblas32): its version, build configuration and the kernels
    it picked for this CPU."""
    import scipy_openblas32

    lib = Path(scipy_openblas32.get_lib_dir()) / f"lib{scipy_openblas32.get_library()}.so"
    try:
        so = ctypes.CDLL(str(lib))
        prefix = scipy_openblas32.get_library().removesuffix("openblas")
        get = lambda name: getattr(so, f"{prefix}openblas_{name}")
        for f in ("get_config", "get_corename"):
            get(f).restype = ctypes.c_char_p
        config, core = (get(f)().decode() for f in ("get_config", "get_corename"))
    except (OSError, AttributeError) as e:
        return f"scipy-openblas32 {scipy_openblas32.__version__} (cannot load {lib}: {e})"
    forced = os.environ.get("OPENBLAS_CORETYPE")
    return (f"scipy-openblas32 {scipy_openblas32.__version__}: {config.strip()}; kernels "
            f"{core}" + (f" (OPENBLAS_CORETYPE={forced} set)" if forced else ""))


def cuda_devices() -> list[str]:
    """The CUDA devices nvidia-smi lists (name, memory, compute capability, driver)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run([smi, "--query-gpu=name,memory.total,compute_cap,driver_version",
                              "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=30)
    except (OSError, subprocess.SubprocessError):
        return []
    rows = [r.split(", ") for r in out.stdout.strip().splitlines() if r.strip()]
    return [f"{r[0]}, {r[1]}, compute capability {r[2]}, driver {r[3]}" if len(r) == 4
            else ", ".join(r) for r in rows]


def cache_usage(root: Path) -> dict[str, tuple[int, int]]:
    """Per cache folder: (entries, bytes). Entries: artifacts (.lar), weight files (.gguf),
    libraries (.so)."""
    out = {}
    for name in CACHES:
        files = [p for p in (root / name).rglob("*") if p.is_file()] if (root / name).is_dir() \
            else []
        want = _ENTRY.get(name, ".so")
        out[name] = (sum(p.suffix == want for p in files), sum(p.stat().st_size for p in files))
    return out


def cmd_info(args: argparse.Namespace) -> int:
    from lumos.runtime.cpu.cc import FLAGS, amx
    from lumos.runtime.cpu.program import compiler

    info = cpuinfo()
    have, lack = features(info)
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    rows = [("cpu", f"{info.get('model name') or platform.processor() or '?'} "
                    f"({platform.machine()})"),
            ("cores", f"{os.cpu_count()} logical, {physical_cores() or '?'} physical, "
                      f"{usable or '?'} usable by this process"),
            ("isa", " ".join(have) or "none of those lumos looks for"),
            ("isa absent", " ".join(lack) or "-"),
            ("amx", "usable (bf16x3 products under matmul_precision='high')" if amx() else
             "not usable here (the CPU, the kernel or the compiler lacks it)"),
            ("caches", "; ".join(caches()) or "?"),
            ("memory", memory() or "?"),
            ("huge pages", huge_pages())]
    if args.bandwidth:
        from lumos.cli.common import copy_bandwidth

        rows.append(("copy bandwidth", f"{copy_bandwidth(1.0) / 1e9:.1f} GB/s (read + write, "
                                       f"{os.cpu_count()} threads)"))
    rows += [("c compiler", f"{compiler(os.environ.get('CC') or 'cc')} {' '.join(FLAGS)}"),
             ("blas", openblas()),
             ("cuda", "; ".join(cuda_devices()) or "no device (nvidia-smi finds none)")]
    root = cache_root()
    if args.clear:
        for name in CACHES:
            shutil.rmtree(root / name, ignore_errors=True)
        (root / VERDICTS).unlink(missing_ok=True)
        rows.append(("cleared", f"{', '.join(CACHES)} and {VERDICTS} under {root}"))
    use = cache_usage(root)
    rows.append(("cache", f"{root} (LUMOS_CACHE)"))
    what = {"artifacts": ("artifacts", "artifacts (saved choices)"),
            "cpu": ("kernels", "compiled kernel libraries"),
            "shipped": ("shipped", "kernel libraries from shipped artifacts"),
            "weights": ("weights", "weight files joined from chunk packages")}
    rows += [(f"  {what[name][0]}", f"{size / 2**20:.1f} MiB, {n} {what[name][1]}")
             for name, (n, size) in use.items()]
    store = root / VERDICTS
    rows.append(("  search", f"{store.stat().st_size / 2**20 if store.is_file() else 0:.1f} "
                             f"MiB, {stored(store)} verdicts of earlier searches"))
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
    return 0
