"""What the benchmark scripts share: the machine a figure was taken on (every figure is reported beside it)."""
from __future__ import annotations

import os
import platform
import sys

ISA_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_tile")  # what decides the kernels torch and numpy use


def machine(packages=()) -> dict:
    """CPU (its model name and bf16/AVX flags, ``ark.machine``), cores, memory, load, platform, Python, the versions of
    ``packages`` that are importable, and torch's threads and kernels when torch is loaded."""
    from ark.machine import cpu_flags, cpu_name

    info = {"cpu": cpu_name(), "cpus": os.cpu_count(), "isa_flags": [f for f in ISA_FLAGS if f in cpu_flags()],
            "memory_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9, 1),
            "load_average": round(os.getloadavg()[0], 2), "platform": platform.platform(),
            "python": platform.python_version()}
    for name in packages:
        try:
            info[name] = __import__(name).__version__
        except (ImportError, AttributeError):
            pass
    if "torch" in sys.modules:
        torch = sys.modules["torch"]
        info.update(torch=torch.__version__, torch_threads=torch.get_num_threads(),
                    cpu_capability=torch.backends.cpu.get_cpu_capability())
        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
    # set, these make torch use AVX2 kernels only: an AVX2-only CPU simulated on one with AVX-512 or AMX (MKL's
    # float32 matrix products ignore the first two and keep AVX-512 unless MKL_ENABLE_INSTRUCTIONS=AVX2 is set too)
    info["isa_limits"] = {k: os.environ[k] for k in ("ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS")
                          if k in os.environ}
    return info


def rss_mib(pid: int | str = "self") -> float:
    """Resident memory of a process (this one by default) in MiB (0 once it has gone)."""
    try:
        status = open(f"/proc/{pid}/status").read()
    except OSError:
        return 0.0
    return next((int(line.split()[1]) / 1024 for line in status.splitlines() if line.startswith("VmRSS:")), 0.0)
