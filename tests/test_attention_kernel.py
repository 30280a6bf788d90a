"""The batched decoding step's attention kernel (``ark.llm.attention``), for float32 and for bfloat16 keys and values:
it computes torch's attention, a row's result does not depend on the other rows or on the threads, and where it
cannot be built a float32 model with batched steps refuses to start, in one line (a bfloat16 one takes torch's).
Each kernel is compiled once per machine (about a minute) and cached."""
import logging
import os
import string
import sys

import pytest
import torch
import torch.nn.functional as F

import ark  # noqa: F401  (offline environment defaults)
import ark.llm.attention as attention_module
from ark.errors import UserError
from ark.llm import batching
from ark.llm.local import LocalChatModel
from tests.test_batching import as_transformers_cache, copy, prefilled
from tests.test_local_speed import tiny  # noqa: F401  (fixture)


def build(dtype):
    path = list(sys.path)
    attention_module.compiled.cache_clear()
    built = attention_module.compiled(dtype)
    assert sys.path == path  # torch's builder (setuptools) appends to it; left so, importlib.metadata sees old versions
    if built is None:
        pytest.fail(f"the {dtype} attention kernel did not build on this machine (see the warning); it needs a C++ "
                    "compiler and ninja (both in the lock's environment)")
    return built


@pytest.fixture(scope="module", params=[torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def kv_dtype(request):
    return request.param


@pytest.fixture(scope="module")
def kernel(kv_dtype):
    return build(kv_dtype)


@pytest.fixture(scope="module")
def tiny_kernel(tiny):
    return build(tiny.dtype)


def close(dtype, float32: float = 1e-5) -> dict:
    """How near a step's logits come to the model's own: float32 to rounding (``float32``); in bfloat16 the kernel's
    float32 sums against torch's attention rounded to bfloat16 on the way (one bfloat16 step of the logits)."""
    return {"atol": float32, "rtol": float32} if dtype == torch.float32 else {"atol": 1e-2, "rtol": 1e-2}


class Rows:
    """Rows of a decoding step as the kernel takes them: each row's own buffers (room to spare, one piece a row),
    its length, and its new position's query, key and value. ``call`` runs the kernel on copies of the buffers."""

    def __init__(self, lengths, heads=9, kv_heads=3, dim=64, seed=0, dtype=torch.float32):
        g = torch.Generator().manual_seed(seed)
        self.lengths, self.scale = list(lengths), dim ** -0.5
        self.keys, self.values = ([torch.randn(kv_heads, n + 5, dim, generator=g).to(dtype) for n in lengths]
                                  for _ in range(2))
        self.q = torch.randn(len(lengths), heads, dim, generator=g)  # float32 whatever the keys' dtype
        self.k_new, self.v_new = (torch.randn(len(lengths), kv_heads, dim, generator=g).to(dtype) for _ in range(2))

    def pick(self, *rows):
        out = Rows([])
        out.scale, out.lengths = self.scale, [self.lengths[i] for i in rows]
        out.keys, out.values = [self.keys[i] for i in rows], [self.values[i] for i in rows]
        out.q, out.k_new, out.v_new = (t[list(rows)].contiguous() for t in (self.q, self.k_new, self.v_new))
        return out

    def call(self, kernel):
        keys, values = [k.clone() for k in self.keys], [v.clone() for v in self.values]
        ones = [1] * len(self.lengths)
        return kernel(self.q, self.k_new, self.v_new, keys, values, ones, self.lengths, self.scale), keys, values


@pytest.mark.parametrize("heads, kv_heads, dim", [(9, 3, 64), (4, 2, 12), (2, 2, 8)])
def test_the_kernel_writes_the_new_position_and_computes_torchs_attention(kernel, kv_dtype, heads, kv_heads, dim):
    rows = Rows([0, 37, 700, 1500], heads, kv_heads, dim, dtype=kv_dtype)
    got, keys, values = rows.call(kernel)
    for i, n in enumerate(rows.lengths):
        assert torch.equal(keys[i][:, n], rows.k_new[i]) and torch.equal(values[i][:, n], rows.v_new[i])
        assert torch.equal(keys[i][:, :n], rows.keys[i][:, :n]) and torch.equal(keys[i][:, n + 1:], rows.keys[i][:, n + 1:])
        k = torch.cat([rows.keys[i][:, :n], rows.k_new[i][:, None]], 1)
        v = torch.cat([rows.values[i][:, :n], rows.v_new[i][:, None]], 1)
        want = F.scaled_dot_product_attention(rows.q[i][None, :, None], k[None].float(), v[None].float(),
                                              scale=rows.scale, enable_gqa=True)[0, :, 0]
        torch.testing.assert_close(got[i], want, atol=1e-5, rtol=1e-5)


def test_a_rows_result_does_not_depend_on_the_other_rows_or_the_threads(kernel, kv_dtype):
    rows = Rows([1500, 1620, 30, 2000, 700, 1900, 1960, 5], dtype=kv_dtype)
    full = rows.call(kernel)[0]
    alone = rows.pick(3).call(kernel)[0]
    others = Rows([4000, 3], seed=9, dtype=kv_dtype)
    mixed = Rows([])
    mixed.scale, mixed.lengths = rows.scale, [4000, rows.lengths[3], 3]
    mixed.keys, mixed.values = [others.keys[0], rows.keys[3], others.keys[1]], [others.values[0], rows.values[3], others.values[1]]
    mixed.q, mixed.k_new, mixed.v_new = (torch.stack([o[0], r[3], o[1]]) for o, r in
                                         ((others.q, rows.q), (others.k_new, rows.k_new), (others.v_new, rows.v_new)))
    beside = mixed.call(kernel)[0]
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one_thread = rows.call(kernel)[0]
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(full[3], alone[0]) and torch.equal(full[3], beside[1])
    assert torch.equal(full, one_thread)


def test_a_row_read_from_shared_pieces_gets_the_bits_it_gets_from_one_buffer(kernel, kv_dtype):
    rows = Rows([700, 1500, 40], dtype=kv_dtype)
    whole, keys, values = rows.call(kernel)
    cuts = [(0, 256, 512, 600), (0, 256), (0, 3, 17)]  # shared pieces, then the own buffer from the last cut on
    pieces_k, pieces_v, counts, owns = [], [], [], []
    for r, at in enumerate(cuts):
        for buf, out in ((rows.keys[r], pieces_k), (rows.values[r], pieces_v)):
            out += [buf[:, a:b] for a, b in zip(at, at[1:])] + [buf[:, at[-1]:].clone()]
        counts.append(len(at))
        owns.append(rows.lengths[r] - at[-1])
    got = kernel(rows.q, rows.k_new, rows.v_new, pieces_k, pieces_v, counts, owns, rows.scale)
    assert torch.equal(got, whole)
    own = [sum(counts[:r + 1]) - 1 for r in range(3)]
    assert all(torch.equal(pieces_k[own[r]][:, owns[r]], rows.k_new[r]) for r in range(3))  # written in its own


def test_the_kernel_refuses_what_it_cannot_compute(kernel, kv_dtype):
    rows = Rows([10], dtype=kv_dtype)
    with pytest.raises(RuntimeError, match="multiple of key/value heads"):
        kernel(torch.randn(1, 4, 64), rows.k_new, rows.v_new, rows.keys, rows.values, [1], rows.lengths, 0.125)
    with pytest.raises(RuntimeError, match="float32"):
        kernel(rows.q.bfloat16(), rows.k_new, rows.v_new, rows.keys, rows.values, [1], rows.lengths, 0.125)
    with pytest.raises(RuntimeError, match="one count and length a row"):
        kernel(torch.randn(2, 9, 64), rows.k_new, rows.v_new, rows.keys, rows.values, [1], rows.lengths, 0.125)
    with pytest.raises(RuntimeError, match="one key and value cache a row"):
        kernel(rows.q, rows.k_new, rows.v_new, rows.keys, rows.values, [2], rows.lengths, 0.125)
    with pytest.raises(RuntimeError, match="no room for the new position"):
        kernel(rows.q, rows.k_new, rows.v_new, rows.keys, rows.values, [1], [15], 0.125)
    other = torch.bfloat16 if kv_dtype == torch.float32 else torch.float32  # the other build's dtype
    with pytest.raises(RuntimeError, match=str(kv_dtype).removeprefix("torch.")):
        kernel(rows.q, rows.k_new, rows.v_new, [k.to(other) for k in rows.keys], rows.values, [1], rows.lengths, 0.125)
    with pytest.raises(RuntimeError, match="new keys, values"):
        kernel(rows.q, rows.k_new.to(other), rows.v_new, rows.keys, rows.values, [1], rows.lengths, 0.125)


def test_a_batched_step_with_the_kernel_computes_the_models_step_and_keeps_rows_apart(tiny, tiny_kernel):
    kernel = tiny_kernel
    kvs = [prefilled(tiny, n, seed) for seed, n in enumerate((9, 40, 300))]
    with torch.inference_mode():
        batched = batching.decode_rows(tiny, [copy(tiny, c, share=True) for c in kvs], [21, 22, 23], rows=4,
                                       attention=kernel)
        alone = batching.decode_rows(tiny, [copy(tiny, kvs[1])], [22], rows=4, attention=kernel)
        for i, (kv, token) in enumerate(zip(kvs, (21, 22, 23))):
            own = tiny(input_ids=torch.tensor([[token]]), past_key_values=as_transformers_cache(kv),
                       use_cache=True).logits[0, -1]
            torch.testing.assert_close(batched[i], own.float(), **close(tiny.dtype))
    assert torch.equal(batched[1], alone[0])


def test_the_identity_names_the_attention_and_a_failed_build_stops_the_model_in_one_line(tiny, tokenizer, monkeypatch,
                                                                                         caplog, tmp_path):
    assert LocalChatModel.from_model(tiny, tokenizer, decode_rows=2, attention="torch").identity["attention"] == "torch"
    built = LocalChatModel.from_model(tiny, tokenizer, decode_rows=2).identity["attention"]
    # the kernel's version, one a dtype: replies change with it
    assert built == f"compiled {attention_module.source_digest(tiny.dtype)}"
    assert attention_module.source_digest(torch.float32) != attention_module.source_digest(torch.bfloat16)
    # the float32 source Table 5's embedded rows were computed with (their identity): a change recomputes all 15
    assert attention_module.source_digest(torch.float32) == "28634840a82f"
    with pytest.raises(ValueError, match="float32 or bfloat16"):
        LocalChatModel.from_model(type(tiny)(tiny.config).half(), tokenizer, decode_rows=2, attention="compiled")
    monkeypatch.setattr(attention_module, "TEMPLATE", string.Template(attention_module.TEMPLATE.template + "// x\n"))
    assert attention_module.source_digest(tiny.dtype) != built.split()[1]
    assert "attention" not in LocalChatModel.from_model(tiny, tokenizer, decode_rows=1).identity
    with pytest.raises(ValueError, match="auto, compiled or torch"):
        LocalChatModel.from_model(tiny, tokenizer, decode_rows=2, attention="fast")

    def no_compiler(*args, **kwargs):  # torch's message: the command it ran, then the compiler's output
        raise RuntimeError("Error building extension 'x': [1/2] c++ -MMD -MF main.o.d -O3 -c main.cpp\n"
                           "main.cpp:2:10: fatal error: torch/extension.h: No such file or directory\nmore lines")

    monkeypatch.setattr("torch.utils.cpp_extension.load_inline", no_compiler)
    monkeypatch.setattr(attention_module, "kernel_dir", lambda: tmp_path)
    stale = tmp_path / attention_module.build_key(tiny.dtype) / "lock"  # left by a build that was killed
    stale.parent.mkdir()
    stale.touch()
    os.utime(stale, (1, 1))
    attention_module.compiled.cache_clear()
    try:
        with caplog.at_level(logging.WARNING, logger="ark.llm.attention"):
            with pytest.raises(UserError, match="could not be built.*C[+][+] compiler.*decode_rows=1"):
                LocalChatModel.from_model(tiny, tokenizer, decode_rows=2,
                                          attention="auto" if tiny.dtype == torch.float32 else "compiled")
        warned = [r.getMessage() for r in caplog.records if r.name == "ark.llm.attention"]
        assert len(warned) == 1 and warned[0].endswith("fatal error: torch/extension.h: No such file or directory")
        assert not stale.exists()
        assert LocalChatModel.from_model(tiny, tokenizer, decode_rows=2, attention="torch").batcher.attention is None
        assert LocalChatModel.from_model(tiny, tokenizer, decode_rows=1).batcher is None
        if tiny.dtype == torch.bfloat16:  # bfloat16 decodes with torch's attention then, and its identity says so
            fallback = LocalChatModel.from_model(tiny, tokenizer, decode_rows=2)
            assert fallback.batcher.attention is None and fallback.identity["attention"] == "torch"
    finally:
        attention_module.compiled.cache_clear()


def test_steps_and_passes_over_shared_pieces_are_those_over_own_buffers(tiny, tiny_kernel):
    """70 steps (past the own buffers' room), one row fed tokens by two passes in a row halfway (as a grammar's
    sampled and forced tokens are): a row that reads its prompt from shared pieces gets the bits of one that copied
    it, every step's logits are the model's own, and the other row's are those it gets alone."""
    kernel = tiny_kernel
    start = [prefilled(tiny, n, seed) for seed, n in enumerate((20, 45))]
    shared, copied = [copy(tiny, c, share=True) for c in start], [copy(tiny, c) for c in start]
    alone, own = copy(tiny, start[1]), [as_transformers_cache(c) for c in start]
    with torch.inference_mode():
        for step in range(70):
            if step == 35:
                for ids in ([7, 8], [9, 10, 11]):
                    for kv in (shared[0], copied[0]):
                        batching.prefill(tiny, kv, ids, 256)
                    tiny(input_ids=torch.tensor([ids]), past_key_values=own[0], use_cache=True)
            tokens = [100 + step, 200 + step]
            got = batching.decode_rows(tiny, shared, tokens, rows=2, attention=kernel)
            assert torch.equal(got, batching.decode_rows(tiny, copied, tokens, rows=2, attention=kernel))
            lone = batching.decode_rows(tiny, [alone], tokens[1:], rows=2, attention=kernel)
            assert torch.equal(got[1], lone[0])
            for i in range(2):
                want = tiny(input_ids=torch.tensor([[tokens[i]]]), past_key_values=own[i], use_cache=True).logits[0, -1]
                torch.testing.assert_close(got[i], want.float(), **close(tiny.dtype, float32=1e-4))
    assert shared[0].length == own[0].get_seq_length() == 20 + 70 + 5 and shared[0].base == 20
    torch.testing.assert_close(shared[0].positions(0, 95)[1][0], own[0].layers[1].keys[0], **close(tiny.dtype))


def test_the_build_runs_the_locked_ninja_whatever_comes_first_on_path(monkeypatch, tmp_path):
    """A system ninja of another log format first on PATH would make every switch between it and the wheel's rebuild
    the kernel; the wheel's goes first while building, and PATH is as it was afterwards."""
    import ninja

    seen = []

    def builder(*args, **kwargs):
        seen.append(os.environ["PATH"].split(os.pathsep)[0])
        raise RuntimeError("stop here")

    monkeypatch.setenv("PATH", f"/usr/bin{os.pathsep}/bin")
    monkeypatch.setattr("torch.utils.cpp_extension.load_inline", builder)
    monkeypatch.setattr(attention_module, "kernel_dir", lambda: tmp_path)
    attention_module.compiled.cache_clear()
    try:
        assert attention_module.compiled() is None
    finally:
        attention_module.compiled.cache_clear()
    assert seen == [ninja.BIN_DIR] and os.environ["PATH"] == f"/usr/bin{os.pathsep}/bin"


def test_a_run_of_tokens_with_the_kernel_gives_the_bits_of_one_step_a_token(tiny, tiny_kernel):
    """Forced tokens as rows of one step: the kernel reads each row's earlier run positions in place and its own
    new key from a scratch position; the bits are those of one step a token, whatever shares the step."""
    kernel = tiny_kernel
    kvs = [prefilled(tiny, n, seed) for seed, n in enumerate((300, 40))]
    with torch.inference_mode():
        one_by_one = copy(tiny, kvs[0], share=True)
        for token in (5, 6, 7, 8):
            want = batching.decode_rows(tiny, [one_by_one], [token], rows=6, attention=kernel)[0]
        lone = batching.decode_rows(tiny, [copy(tiny, kvs[1], share=True)], [11], rows=6, attention=kernel)[0]
        run = copy(tiny, kvs[0], share=True)
        got = batching.decode_rows(tiny, [copy(tiny, kvs[1], share=True), run], [11, [5, 6, 7, 8]], rows=6,
                                   attention=kernel)
    assert torch.equal(got[1], want) and torch.equal(got[0], lone)
    assert run.length == one_by_one.length == 304
    assert all(torch.equal(x, y) for pair, other in zip(run.positions(0, 304), one_by_one.positions(0, 304))
               for x, y in zip(pair, other))
