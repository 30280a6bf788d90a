"""The batched decoding step's attention kernel (``ark.llm.attention``): it computes torch's attention, a row's
result does not depend on the other rows or on the threads, and where it cannot be built a float32 model with
batched steps refuses to start, in one line. The kernel is compiled once per machine (about a minute) and cached."""
import logging

import pytest
import torch
import torch.nn.functional as F

import ark  # noqa: F401  (offline environment defaults)
import ark.llm.attention as attention_module
from ark.errors import UserError
from ark.llm import batching
from ark.llm.local import LocalChatModel
from tests.test_batching import copy, prefilled
from tests.test_local_speed import tiny  # noqa: F401  (fixture)


@pytest.fixture(scope="module")
def kernel():
    built = attention_module.compiled()
    if built is None:
        pytest.fail("the attention kernel did not build on this machine (see the warning); it needs a C++ compiler "
                    "and ninja (both in the lock's environment)")
    return built


def caches(lengths, kv_heads, dim, spare=5, seed=0):
    """Each row's keys and values as ``append`` leaves them: views of longer buffers."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for n in lengths:
        k, v = (torch.randn(kv_heads, n + spare, dim, generator=g) for _ in range(2))
        out.append((k[:, :n], v[:, :n]))
    return [k for k, _ in out], [v for _, v in out]


@pytest.mark.parametrize("heads, kv_heads, dim", [(9, 3, 64), (4, 2, 12), (2, 2, 8)])
def test_the_kernel_computes_torchs_attention_over_each_rows_own_length(kernel, heads, kv_heads, dim):
    lengths = [1, 37, 700, 1500]
    keys, values = caches(lengths, kv_heads, dim)
    q = torch.randn(len(lengths), heads, dim, generator=torch.Generator().manual_seed(1))
    got = kernel(q, keys, values, dim ** -0.5)
    for i in range(len(lengths)):
        want = F.scaled_dot_product_attention(q[i:i + 1, :, None], keys[i][None], values[i][None], scale=dim ** -0.5,
                                              enable_gqa=True)[0, :, 0]
        torch.testing.assert_close(got[i], want, atol=1e-5, rtol=1e-5)


def test_a_rows_result_does_not_depend_on_the_other_rows_or_the_threads(kernel):
    keys, values = caches([1500, 1620, 30, 2000, 700, 1900, 1960, 5], 3, 64)
    q = torch.randn(8, 9, 64, generator=torch.Generator().manual_seed(2))
    full = kernel(q, keys, values, 0.125)
    alone = kernel(q[3:4].contiguous(), keys[3:4], values[3:4], 0.125)
    other_keys, other_values = caches([4000, 3], 3, 64, seed=9)
    beside = kernel(q[[0, 3, 5]].contiguous(), [other_keys[0], keys[3], other_keys[1]],
                    [other_values[0], values[3], other_values[1]], 0.125)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one_thread = kernel(q, keys, values, 0.125)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(full[3], alone[0]) and torch.equal(full[3], beside[1])
    assert torch.equal(full, one_thread)


def test_the_kernel_refuses_what_it_cannot_compute(kernel):
    keys, values = caches([10], 3, 64)
    with pytest.raises(RuntimeError, match="multiple of key/value heads"):
        kernel(torch.randn(1, 4, 64), keys, values, 0.125)
    with pytest.raises(RuntimeError, match="float32"):
        kernel(torch.randn(1, 9, 64).bfloat16(), keys, values, 0.125)
    with pytest.raises(RuntimeError, match="one key and value cache a row"):
        kernel(torch.randn(2, 9, 64), keys, values, 0.125)


def test_a_batched_step_with_the_kernel_computes_the_models_step_and_keeps_rows_apart(tiny, kernel):
    if tiny.dtype != torch.float32:
        pytest.skip("the kernel is float32 only")
    cached = [prefilled(tiny, n, seed) for seed, n in enumerate((9, 40, 300))]
    with torch.inference_mode():
        batched = batching.decode_rows(tiny, [copy(c) for c in cached], [21, 22, 23], rows=4, attention=kernel)
        alone = batching.decode_rows(tiny, [copy(cached[1])], [22], rows=4, attention=kernel)
        for i, (cache, token) in enumerate(zip(cached, (21, 22, 23))):
            own = tiny(input_ids=torch.tensor([[token]]), past_key_values=copy(cache), use_cache=True).logits[0, -1]
            torch.testing.assert_close(batched[i], own.float(), atol=1e-5, rtol=1e-5)
    assert torch.equal(batched[1], alone[0])


def test_the_identity_names_the_attention_and_a_failed_build_stops_the_model_in_one_line(tiny, tokenizer, monkeypatch,
                                                                                         caplog, tmp_path):
    if tiny.dtype != torch.float32:
        with pytest.raises(ValueError, match="float32 only"):
            LocalChatModel.from_model(tiny, tokenizer, decode_rows=2, attention="compiled")
        assert LocalChatModel.from_model(tiny, tokenizer, decode_rows=2).identity["attention"] == "torch"
        return
    assert LocalChatModel.from_model(tiny, tokenizer, decode_rows=2, attention="torch").identity["attention"] == "torch"
    assert "attention" not in LocalChatModel.from_model(tiny, tokenizer, decode_rows=1).identity
    with pytest.raises(ValueError, match="auto, compiled or torch"):
        LocalChatModel.from_model(tiny, tokenizer, decode_rows=2, attention="fast")

    def no_compiler(*args, **kwargs):
        raise RuntimeError("Error building extension: c++: not found\nmore lines")

    monkeypatch.setattr("torch.utils.cpp_extension.load_inline", no_compiler)
    monkeypatch.setattr(attention_module, "kernel_dir", lambda: tmp_path)
    attention_module.compiled.cache_clear()
    try:
        with caplog.at_level(logging.WARNING, logger="ark.llm.attention"):
            with pytest.raises(UserError, match="could not be built.*C[+][+] compiler.*decode_rows=1"):
                LocalChatModel.from_model(tiny, tokenizer, decode_rows=2)
        warned = [r.getMessage() for r in caplog.records if r.name == "ark.llm.attention"]
        assert len(warned) == 1 and "c++: not found" in warned[0] and "more lines" not in warned[0]
        assert LocalChatModel.from_model(tiny, tokenizer, decode_rows=2, attention="torch").batcher.attention is None
        assert LocalChatModel.from_model(tiny, tokenizer, decode_rows=1).batcher is None
    finally:
        attention_module.compiled.cache_clear()
