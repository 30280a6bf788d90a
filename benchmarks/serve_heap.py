"""`ark serve`'s heap while requests run: resident memory against what is in use, with and without the trim a
second (``ark.serve.IdleRelease``).

Loads the embedded model as `ark serve` does (float32 or bfloat16 by the CPU, 8 decoding rows, two glibc heaps,
the default 1 GiB key/value bound) and runs ``--conversations`` conversations at once through
``LocalChatModel.generate``, wrapped by ``IdleRelease`` as the server wraps it: each of ``--turns`` user turns of
about 2,700 tokens of made-up words, a reply of at most 8 tokens, the whole conversation sent again each turn (as an
agent's steps are). Samples the process's resident memory every 50 ms and, at its peak, glibc's heap figures
(``mallinfo2``: in use, free). Prints one JSON line::

    python benchmarks/serve_heap.py [--trim-s 1.0 | --trim-s 0] [--conversations 6] [--turns 2]

``--trim-s 0``: no trim while busy (the server before it had one).
"""
from __future__ import annotations

import argparse
import ctypes
import json
import random
import sys
import threading
import time
from pathlib import Path

import ark  # noqa: F401  (offline environment defaults)
from ark.llm.local import LocalChatModel
from ark.serve import IdleRelease, fewer_heaps

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, rss_mib  # noqa: E402


class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                      "fsmblks", "uordblks", "fordblks", "keepcost")]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trim-s", type=float, default=1.0, help="trim period while busy; 0: none")
    p.add_argument("--conversations", type=int, default=6)
    p.add_argument("--turns", type=int, default=2)
    p.add_argument("--words", type=int, default=550, help="made-up words a user turn (~4.9 tokens each)")
    args = p.parse_args()

    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = MallInfo2
    fewer_heaps()
    model = LocalChatModel(dtype="auto", decode_rows=8)
    libc.malloc_trim(0)
    loaded = rss_mib()

    trims: list[float] = []

    def trim() -> None:
        start = time.perf_counter()
        libc.malloc_trim(0)
        trims.append(time.perf_counter() - start)

    idle = IdleRelease(model, trim_s=args.trim_s or 1.0, trim=trim if args.trim_s > 0 else (lambda: None)).start()
    generate = idle.wrap(model.generate)
    peak, at_peak, done = [0.0], [{}], threading.Event()

    def sample() -> None:
        while not done.is_set():
            now = rss_mib()
            if now > peak[0]:
                info = libc.mallinfo2()
                peak[0], at_peak[0] = now, {"heap_in_use_mib": info.uordblks >> 20, "heap_free_mib": info.fordblks >> 20,
                                            "mmapped_mib": info.hblkhd >> 20}
            time.sleep(0.05)

    prompt_tokens: list[int] = []

    def conversation(seed: int) -> None:
        rng = random.Random(seed)
        messages = [{"role": "system", "content": "You are a helpful agent. " * 10}]
        for _ in range(args.turns):
            messages.append({"role": "user", "content": " ".join(f"w{rng.randrange(5000)}" for _ in range(args.words))})
            out = generate({"messages": messages, "max_tokens": 8, "temperature": 0})
            prompt_tokens.append(out["usage"]["prompt_tokens"])
            messages.append({"role": "assistant", "content": out["choices"][0]["message"]["content"] or "ok"})

    threading.Thread(target=sample, daemon=True).start()
    start = time.monotonic()
    threads = [threading.Thread(target=conversation, args=(i,)) for i in range(args.conversations)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - start
    done.set()
    idle.stop()
    print(json.dumps({"trim_s": args.trim_s, "conversations": args.conversations, "turns": args.turns,
                      "longest_prompt_tokens": max(prompt_tokens), "wall_s": round(wall, 1),
                      "rss_loaded_mib": round(loaded), "rss_peak_mib": round(peak[0]), **at_peak[0],
                      "trims": len(trims), "trim_ms_mean": round(1000 * sum(trims) / max(1, len(trims)), 1),
                      "trim_ms_max": round(1000 * max(trims or [0.0]), 1), "machine": machine()}))


if __name__ == "__main__":
    main()
