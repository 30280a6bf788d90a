"""The attention of a batched decoding step (``ark.llm.batching.decode_rows``) in one call: every row over its own
key/value cache, however long, each row computed alone in a fixed order.

torch's attention takes one call per row and layer here (240 a step for 8 rows of SmolLM2) and reads the keys and
values at about half the memory rate of this kind of CPU; one torch call over all rows needs them padded to one
length, was slower, and gave a row other bits beside other rows (benchmarks/README.md, *batched_attention.py*).
This kernel is one call per layer: a task per row and key/value head reads that head's keys and values once for
all the query heads that share it (grouped-query attention), scores every position, takes the softmax and sums the
values, in an order that depends on that row alone. A row's keys and values come in pieces (kept prompt chunks that
several rows read in place, then the row's own buffer), read in position order: the same arithmetic as one buffer. So a row's result is the same whoever shares its step and
however many threads run it, which ``decode_rows`` needs (a reply must not depend on which requests met).

It is C++ compiled for the CPU at hand (``-march=native``) on first use with torch's extension builder (a C++
compiler and ninja), and kept under ``~/.cache/ark/kernels`` (one build per source, torch version and CPU). Where
it cannot be built, ``compiled()`` says why in one warning and returns None, and a float32 model with batched steps
refuses to start (its replies differ from torch's per-row attention in the last bits, and a run's identity assumes
the kernel: ``LocalChatModel.identity["attention"]``); a bfloat16 one decodes with torch's attention, and its
identity says so. Built for keys and values in float32 (the dtype of CPUs without native bfloat16) or bfloat16 (read
and converted to float32 as they are read: the scores, the softmax and the sums are float32 in both), one build
each.
"""
from __future__ import annotations

import functools
import hashlib
import logging
import os
import platform
import shutil
import string
import sys
import time
from pathlib import Path
from typing import Callable

import torch

TEMPLATE = string.Template(r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

// e^x for x <= 0 (a score less its row's maximum), elementwise arithmetic the compiler vectorises (std::exp is a
// library call a score, a third of the kernel's time at 2,000 positions): 2^(x log2 e) split into a power of two and a
// remainder in [-0.5, 0.5], whose power a degree-6 polynomial gives (within 4.5e-8 of std::exp in softmax weights)
static inline float exp_nonpositive(float x) {
  x = x < -87.f ? -87.f : x;  // below, e^x is no longer a normal float
  const float t = x * 1.44269504088896341f;
  const float n = (t + 12582912.f) - 12582912.f;  // t rounded to an integer (1.5 * 2^23 drops the fraction)
  const float r = t - n;
  float p = 1.535336188319500e-4f;
  p = p * r + 1.339887440266574e-3f;
  p = p * r + 9.618437357674640e-3f;
  p = p * r + 5.550332471162809e-2f;
  p = p * r + 2.402264791363012e-1f;
  p = p * r + 6.931472028550421e-1f;
  p = p * r + 1.0f;
  const int32_t bits = ((int32_t)n + 127) << 23;
  float power;
  std::memcpy(&power, &bits, sizeof power);
  return p * power;
}

// q . k over dim: eight partial sums (lanes the compiler keeps in vector registers), added in a fixed order
static inline float dot(const float* a, const $kv* b, int64_t dim) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t d = 0;
  for (; d + 8 <= dim; d += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[d + j] * b[d + j];
  for (int j = 0; d < dim; ++d, ++j) acc[j] += a[d] * b[d];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// q: [rows, heads, dim]; k_new, v_new: [rows, kv_heads, dim], each row's new position. keys, values: each row's
// pieces in position order, counts[r] of them for row r: shared ones [kv_heads, n, dim] (all n positions read, never
// written), then its own buffer [kv_heads, capacity, dim] holding lengths[r] positions (the last dimension of each
// contiguous). Writes the new position at lengths[r] of the own buffer, then attends each row over all its positions.
torch::Tensor decode_attention(torch::Tensor q, torch::Tensor k_new, torch::Tensor v_new,
                               std::vector<torch::Tensor> keys, std::vector<torch::Tensor> values,
                               std::vector<int64_t> counts, std::vector<int64_t> lengths, double scale) {
  TORCH_CHECK(q.dim() == 3 && q.is_contiguous() && q.scalar_type() == torch::kFloat && q.device().is_cpu(),
              "q: [rows, heads, dim] float32");
  const int64_t rows = q.size(0), heads = q.size(1), dim = q.size(2);
  TORCH_CHECK(rows > 0, "no rows");
  TORCH_CHECK((int64_t)counts.size() == rows && (int64_t)lengths.size() == rows, "one count and length a row");
  TORCH_CHECK(keys.size() == values.size() && !keys.empty(), "as many value pieces as key pieces");
  std::vector<int64_t> first(rows + 1, 0);
  for (int64_t r = 0; r < rows; ++r) {
    TORCH_CHECK(counts[r] > 0, "a row has no cache");
    first[r + 1] = first[r] + counts[r];
  }
  TORCH_CHECK(first[rows] == (int64_t)keys.size(), "one key and value cache a row");
  const int64_t kv_heads = keys[0].size(0);
  TORCH_CHECK(kv_heads > 0 && heads % kv_heads == 0, "query heads must be a multiple of key/value heads");
  for (const auto* t : {&k_new, &v_new})
    TORCH_CHECK(t->dim() == 3 && t->is_contiguous() && t->size(0) == rows && t->size(1) == kv_heads
                && t->size(2) == dim && t->scalar_type() == $kv_scalar && t->device().is_cpu(),
                "new keys, values: [rows, kv_heads, dim]");
  std::vector<int64_t> total(rows, 0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = first[r]; i < first[r + 1]; ++i) {
      for (const auto* t : {&keys[i], &values[i]})
        TORCH_CHECK(t->dim() == 3 && t->size(0) == kv_heads && t->size(2) == dim && t->stride(2) == 1
                    && t->scalar_type() == $kv_scalar && t->device().is_cpu(),
                    "a cache: [kv_heads, capacity, dim] $kv_name");
      TORCH_CHECK(keys[i].size(1) == values[i].size(1), "keys and values of a piece differ in length");
      total[r] += i + 1 < first[r + 1] ? keys[i].size(1) : lengths[r] + 1;
    }
    TORCH_CHECK(lengths[r] >= 0 && lengths[r] < keys[first[r + 1] - 1].size(1),
                "a cache has no room for the new position");
  }
  const int64_t group = heads / kv_heads;
  auto out = torch::empty({rows, heads, dim}, q.options());
  const float* Q = q.data_ptr<float>();
  float* O = out.data_ptr<float>();
  const float s = (float)scale;
  const $kv* KN = k_new.data_ptr<$kv>();
  const $kv* VN = v_new.data_ptr<$kv>();
  const size_t pieces = keys.size();
  std::vector<$kv*> kp(pieces), vp(pieces);
  std::vector<int64_t> k0(pieces), k1(pieces), v0(pieces), v1(pieces), len(pieces);
  for (size_t i = 0; i < pieces; ++i) {
    kp[i] = keys[i].data_ptr<$kv>(), vp[i] = values[i].data_ptr<$kv>();
    k0[i] = keys[i].stride(0), k1[i] = keys[i].stride(1), v0[i] = values[i].stride(0), v1[i] = values[i].stride(1);
    len[i] = keys[i].size(1);
  }
  for (int64_t r = 0; r < rows; ++r) len[first[r + 1] - 1] = lengths[r] + 1;
  pybind11::gil_scoped_release free_python;  // a task touches only its row's own buffer and its rows of out
  // head-major tasks: the rows that share pieces read them one after another, while they are in the CPU's caches
  at::parallel_for(0, rows * kv_heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores, acc(group * dim), sums(group);
    for (int64_t t = begin; t < end; ++t) {
      const int64_t h = t / rows, r = t % rows, n = total[r], own = first[r + 1] - 1;
      std::copy_n(KN + (r * kv_heads + h) * dim, dim, kp[own] + h * k0[own] + lengths[r] * k1[own]);
      std::copy_n(VN + (r * kv_heads + h) * dim, dim, vp[own] + h * v0[own] + lengths[r] * v1[own]);
      const float* q0 = Q + (r * heads + h * group) * dim;
      scores.resize(group * n);
      int64_t p = 0;
      for (int64_t i = first[r]; i <= own; ++i) {
        const $kv* K = kp[i] + h * k0[i];
        for (int64_t j = 0; j < len[i]; ++j, ++p)
          for (int64_t g = 0; g < group; ++g) scores[g * n + p] = dot(q0 + g * dim, K + j * k1[i], dim) * s;
      }
      for (int64_t g = 0; g < group; ++g) {
        float* w = scores.data() + g * n;
        float top = -INFINITY, sum = 0;
        for (int64_t j = 0; j < n; ++j) top = w[j] > top ? w[j] : top;
        for (int64_t j = 0; j < n; ++j) w[j] = exp_nonpositive(w[j] - top);
        for (int64_t j = 0; j < n; ++j) sum += w[j];
        sums[g] = sum;
      }
      std::fill(acc.begin(), acc.end(), 0.f);
      p = 0;
      for (int64_t i = first[r]; i <= own; ++i) {
        const $kv* V = vp[i] + h * v0[i];
        for (int64_t j = 0; j < len[i]; ++j, ++p) {
          const $kv* v = V + j * v1[i];
          for (int64_t g = 0; g < group; ++g) {
            const float w = scores[g * n + p];
            float* a = acc.data() + g * dim;
            for (int64_t d = 0; d < dim; ++d) a[d] += w * v[d];
          }
        }
      }
      for (int64_t g = 0; g < group; ++g) {
        float* o = O + (r * heads + h * group + g) * dim;
        const float inv = 1.f / sums[g];
        for (int64_t d = 0; d < dim; ++d) o[d] = acc[g * dim + d] * inv;
      }
    }
  });
  return out;
}
""")

# what the keys and values are stored as ($kv in the template); scores, softmax and sums are float32 in both
KV_TYPES = {torch.float32: {"kv": "float", "kv_scalar": "torch::kFloat", "kv_name": "float32"},
            torch.bfloat16: {"kv": "at::BFloat16", "kv_scalar": "torch::kBFloat16", "kv_name": "bfloat16"}}


def source(dtype: torch.dtype = torch.float32) -> str:
    """The kernel's C++ for keys and values of ``dtype`` (a float32 query and output in both)."""
    if dtype not in KV_TYPES:
        raise ValueError(f"the attention kernel is built for float32 or bfloat16 keys and values, not {dtype}")
    return TEMPLATE.substitute(KV_TYPES[dtype])

# -fopenmp: without it ATen's parallel_for compiles to a serial loop; with it, it runs on torch's OpenMP threads (the
# library torch loaded, of the same name)
FLAGS = ["-O3", "-march=native", "-fopenmp"]
# torch's builder locks a build directory with a file while it builds; one left by a killed process would make every
# later start wait for ever
STALE_LOCK_S = 600


def build_key(dtype: torch.dtype = torch.float32) -> str:
    """What a build depends on: the source and flags, torch's version and the CPU it is compiled for."""
    from ark.machine import cpu_flags, cpu_name

    text = "\n".join([source(dtype), " ".join(FLAGS), torch.__version__, platform.machine(), cpu_name(),
                      " ".join(sorted(cpu_flags()))])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def build_error(e: Exception) -> str:
    """The line of a build's error that says what went wrong: the compiler's first ``error`` line (torch's message
    begins with the command it ran), else its first line."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()] or [type(e).__name__]
    return next((line for line in lines if "error:" in line.lower()), lines[0])[:300]


def source_digest(dtype: torch.dtype = torch.float32) -> str:
    """The kernel's version in a model's identity: replies change with its source."""
    return hashlib.sha256(source(dtype).encode()).hexdigest()[:12]


def kernel_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ark" / "kernels"


@functools.lru_cache(maxsize=None)
def compiled(dtype: torch.dtype = torch.float32) -> Callable | None:
    """``decode_attention(q, k_new, v_new, keys, values, counts, lengths, scale)`` for keys and values of ``dtype``
    (the query and the result float32; ``ValueError`` for another dtype), built for this CPU, or None with one
    warning where it cannot be built. The build is kept; later processes load it (torch's builder still runs ninja to
    see that it is current, so ninja is needed then too)."""
    log = logging.getLogger(__name__)
    key = build_key(dtype)
    where = kernel_dir() / key
    path, programs = list(sys.path), os.environ.get("PATH")  # torch's builder imports setuptools, which appends its
    try:  # vendored packages to sys.path: a process's importlib.metadata would then see their old versions too
        from torch.utils.cpp_extension import load_inline

        try:  # the locked wheel's ninja, first on PATH while building: the wheel puts the program beside its module,
            import ninja  # and a system ninja of another log format makes the next build with the wheel's start over
            os.environ["PATH"] = f"{ninja.BIN_DIR}{os.pathsep}{os.environ.get('PATH', '')}"
        except ImportError:
            if shutil.which("ninja") is None:
                raise RuntimeError("ninja is not installed") from None
        where.mkdir(parents=True, exist_ok=True)
        lock = where / "lock"
        if lock.exists() and time.time() - lock.stat().st_mtime > STALE_LOCK_S:
            lock.unlink(missing_ok=True)
        if not any(where.glob("*.so")):
            log.info("compiling the decoding step's attention kernel for this CPU (once, about a minute): %s", where)
        module = load_inline(f"ark_decode_attention_{key}", source(dtype), functions=["decode_attention"],
                             extra_cflags=FLAGS, extra_ldflags=["-fopenmp"], build_directory=str(where))
    except Exception as e:  # no compiler, no ninja, a failed build
        log.warning("the decoding attention kernel could not be built: %s", build_error(e))
        log.debug("the whole error: %s", e)
        return None
    finally:
        sys.path[:] = path
        if programs is None:
            os.environ.pop("PATH", None)
        else:
            os.environ["PATH"] = programs
    return module.decode_attention
