"""The CPU this process runs on, read once: its model name and feature flags. What a timing record names, what the
embedded model's "auto" dtype and the dense index's "auto" bf16 decide by, and what the benchmarks print."""
from __future__ import annotations

import platform
from functools import lru_cache


@lru_cache(maxsize=1)
def _cpuinfo() -> tuple[str, frozenset[str]]:
    name, flags = "", frozenset()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and not name:
                    name = value.strip()
                elif key.strip() == "flags" and not flags:
                    flags = frozenset(value.split())
    except OSError:  # not Linux
        pass
    return name or platform.processor() or platform.machine() or "unknown", flags


def cpu_name() -> str:
    return _cpuinfo()[0]


def cpu_flags() -> frozenset[str]:
    return _cpuinfo()[1]
