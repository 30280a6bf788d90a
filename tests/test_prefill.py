"""A prompt's passes (``ark.llm.batching.prefill``): split at multiples of the window, computing what the model's
own forward pass computes, and checked at start-up for whether a position's keys and values depend on where its pass
began (``reuse_granularity``), which decides how a kept prompt may be reused. A tiny random Llama (a test double)."""
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from ark.llm import batching
from ark.llm.weights import pack_linears

W = 32  # the window of these tests


def tiny(dtype=torch.float32, linear="torch"):
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=300, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                         num_key_value_heads=2, intermediate_size=128)).to(dtype).eval()
    if linear == "onednn":
        pack_linears(model, 8)
    return model


def prompt(n: int, seed: int = 0) -> list[int]:
    return torch.randint(0, 300, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def prefilled(model, ids: list[int], start: int = 0, kv: batching.RequestKV | None = None):
    kv = kv if kv is not None else batching.RequestKV(model, room=len(ids))
    logits = None
    with torch.inference_mode():
        for a, b in batching.passes(start, len(ids), W):
            logits = batching.prefill(model, kv, ids[a:b], W)
    return kv, logits


def test_passes_end_at_every_multiple_of_the_window():
    assert batching.passes(0, 70, 32) == [(0, 32), (32, 64), (64, 70)]
    assert batching.passes(40, 64, 32) == [(40, 64)]
    assert batching.passes(63, 65, 32) == [(63, 64), (64, 65)]
    assert batching.passes(5, 5, 32) == []


def test_a_pass_may_not_cross_a_window():
    model = tiny()
    kv, _ = prefilled(model, prompt(30))
    with pytest.raises(ValueError, match="one window"), torch.inference_mode():
        batching.prefill(model, kv, prompt(3, 1), W)
    assert kv.length == 30  # untouched


def test_the_passes_compute_what_the_models_forward_pass_computes():
    model, ids = tiny(), prompt(75)
    kv, logits = prefilled(model, ids)
    with torch.inference_mode():
        out = model(input_ids=torch.tensor([ids]), use_cache=True)
    torch.testing.assert_close(logits, out.logits[0, -1].float(), atol=1e-5, rtol=1e-5)
    for (keys, values), theirs in zip(kv.positions(0, 75), out.past_key_values.layers):
        torch.testing.assert_close(keys, theirs.keys[0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(values, theirs.values[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])  # bfloat16 requests share since its kernel
def test_shared_pieces_are_read_in_place_and_never_written(dtype):
    model, ids = tiny(dtype), prompt(70)
    whole, logits = prefilled(model, ids)
    kept = whole.positions(0, 40)
    before = [(k.clone(), v.clone()) for k, v in kept]
    shared = [[(k[:, :25], v[:, :25]), (k[:, 25:], v[:, 25:])] for k, v in kept]  # two pieces a layer
    kv, again = prefilled(model, ids, 40, batching.RequestKV(model, shared, room=30))
    tolerance = 1e-5 if dtype == torch.float32 else 1e-2  # passes of other lengths: other last bits in bfloat16
    torch.testing.assert_close(again, logits, atol=tolerance, rtol=tolerance)
    assert kv.base == 40 and kv.own == 30 and kv.keys[0].shape[1] == 30  # its own buffers: what it reserved
    assert all(torch.equal(k, k0) and torch.equal(v, v0) for (k, v), (k0, v0) in zip(kept, before))
    copied = batching.RequestKV(model, shared, room=30, share=False)
    assert copied.base == 0 and copied.own == 40 and all(
        torch.equal(a, b) for (k, v), (k2, v2) in zip(kept, copied.positions(0, 40)) for a, b in ((k, k2), (v, v2)))


def test_the_check_finds_rows_that_depend_on_the_length_of_their_pass():
    model = tiny(linear="onednn")
    if batching.reuse_granularity(model, W) != 1:
        pytest.skip("oneDNN's float32 products depend on the number of rows on this CPU")
    q_proj = model.model.layers[1].self_attn.q_proj
    forward = q_proj.forward
    q_proj.forward = lambda x: forward(x) * (1 + 1e-3 * x.shape[-2])  # a row's result now varies with the pass
    assert batching.reuse_granularity(model, W) == W


def test_where_the_check_passes_a_position_is_the_same_from_whichever_position_its_pass_began():
    model = tiny(linear="onednn")
    if batching.reuse_granularity(model, W) != 1:
        pytest.skip("oneDNN's float32 products depend on the number of rows on this CPU")
    ids = prompt(3 * W + 17, seed=3)
    whole, logits = prefilled(model, ids)
    everything = whole.positions(0, len(ids))
    for start in (1, 2, W - 3, W + 1, 2 * W + 16, 3 * W + 16):  # passes of 1 to 3 rows, and across windows
        kv = batching.RequestKV(model, [[(k[:, :start], v[:, :start])] for k, v in everything],
                                room=len(ids) - start)
        kv, again = prefilled(model, ids, start, kv)
        assert torch.equal(again, logits)
        assert all(torch.equal(a, b) for pair, other in zip(everything, kv.positions(0, len(ids)))
                   for a, b in zip(pair, other))
