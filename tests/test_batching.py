"""Batched decoding of the embedded model (``ark.llm.batching``): a request's reply must not depend on which other
requests shared its forward passes. A tiny random Llama with the real SmolLM2 tokenizer, float32 and bfloat16."""
import threading
import time

import pytest
import torch
from transformers import DynamicCache

import ark  # noqa: F401  (offline environment defaults)
from ark.agent.prompt import system_prompt, user_prompt
from ark.llm import batching
from ark.llm.local import LocalChatModel
from tests.test_local_speed import QUESTIONS, conversations, small_chunks, tiny, toolbox  # noqa: F401  (fixtures)

pytestmark = pytest.mark.e2e  # whole module: see pyproject's e2e marker


def prefilled(model, n: int, seed: int, room: int = 8) -> batching.RequestKV:
    """A request's keys and values after a random prompt of ``n`` tokens, with room for ``room`` more."""
    ids = torch.randint(5, model.config.vocab_size, (n,), generator=torch.Generator().manual_seed(seed)).tolist()
    kv = batching.RequestKV(model, room=n + room)
    with torch.inference_mode():
        for a, b in batching.passes(0, n, 256):
            batching.prefill(model, kv, ids[a:b], 256)
    return kv


def copy(model, kv: batching.RequestKV, share: bool = False, room: int = 8) -> batching.RequestKV:
    """A copy of ``kv``: its positions one shared piece (``share``), or its own buffers'."""
    return batching.RequestKV(model, [[pair] for pair in kv.positions(0, kv.length)], room=room, share=share)


def as_transformers_cache(kv: batching.RequestKV) -> DynamicCache:
    return DynamicCache([(k[None], v[None]) for k, v in kv.positions(0, kv.length)])


def test_a_row_does_not_depend_on_the_other_rows(tiny):
    kvs = [prefilled(tiny, n, seed) for seed, n in enumerate((7, 30, 12, 50))]
    with torch.inference_mode():
        alone = batching.decode_rows(tiny, [copy(tiny, kvs[0])], [11], rows=4)
        together = batching.decode_rows(tiny, [copy(tiny, c) for c in kvs], [11, 12, 13, 14], rows=4)
        others = batching.decode_rows(tiny, [copy(tiny, c) for c in kvs[:1] + kvs[2:]], [11, 99, 98], rows=4)
    assert torch.equal(alone[0], together[0]) and torch.equal(alone[0], others[0])
    assert together.shape == (4, tiny.config.vocab_size) and together.dtype == torch.float32


def test_a_batched_step_computes_what_the_model_computes(tiny):
    kvs = [prefilled(tiny, n, seed) for seed, n in enumerate((9, 40))]
    with torch.inference_mode():
        batched = batching.decode_rows(tiny, [copy(tiny, c) for c in kvs], [21, 22], rows=3)
        for i, (kv, token) in enumerate(zip(kvs, (21, 22))):
            own = tiny(input_ids=torch.tensor([[token]]), past_key_values=as_transformers_cache(kv),
                       use_cache=True).logits[0, -1]
            tol = 2e-2 if tiny.dtype == torch.bfloat16 else 1e-5
            torch.testing.assert_close(batched[i], own.float(), atol=tol, rtol=tol)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_rows_attention_is_that_of_enable_gqa(dtype):
    """SmolLM2's shape: 9 query heads over 3 key/value heads; bfloat16 takes the grouped form, to the same bits."""
    torch.manual_seed(0)
    q = torch.randn(1, 9, 1, 64).to(getattr(torch, dtype))
    keys, values = (torch.randn(1, 3, 700, 64).to(getattr(torch, dtype)) for _ in range(2))
    want = torch.nn.functional.scaled_dot_product_attention(q, keys, values, scale=0.125, enable_gqa=True)
    assert torch.equal(batching.attend(q, keys, values, 0.125), want)


def test_a_request_past_its_room_grows_its_buffers_and_keeps_its_positions(tiny):
    kv = prefilled(tiny, 10, 0, room=0)
    before = kv.positions(0, 10)
    with torch.inference_mode():
        for token in range(3):
            batching.decode_rows(tiny, [kv], [token + 5], rows=1)
    assert kv.length == 13 and kv.keys[0].shape[1] == 11 + batching.GROW
    assert all(torch.equal(a, b[:, :10]) for pair, now in zip(before, kv.positions(0, 13)) for a, b in zip(pair, now))


def test_torch_attention_refuses_shared_pieces(tiny):
    with pytest.raises(ValueError, match="share=False"):
        batching.decode_rows(tiny, [copy(tiny, prefilled(tiny, 6, 0), share=True)], [1], rows=1)


def test_more_requests_than_rows_is_refused(tiny):
    with pytest.raises(ValueError, match="3 tokens of 3 requests for a step of 2 rows"):
        batching.decode_rows(tiny, [prefilled(tiny, 4, s) for s in range(3)], [1, 2, 3], rows=2)


def steps_one_by_one(model, kv, tokens, rows, attention=None) -> torch.Tensor:
    """The logits after ``tokens`` fed to ``kv`` one decoding step each (a step of one row in ``rows``)."""
    for token in tokens:
        logits = batching.decode_rows(model, [kv], [token], rows, attention)
    return logits[0]


def same_positions(a: batching.RequestKV, b: batching.RequestKV) -> bool:
    return a.length == b.length and all(torch.equal(x, y) for pair, other in zip(a.positions(0, a.length),
                                                                                  b.positions(0, b.length))
                                        for x, y in zip(pair, other))


def test_a_run_of_tokens_in_one_step_gives_the_bits_of_one_step_a_token(tiny):
    """A tool call's forced tokens are rows of one step: each attends over what came before it alone."""
    kvs = [prefilled(tiny, n, seed) for seed, n in enumerate((30, 12))]
    with torch.inference_mode():
        one_by_one = copy(tiny, kvs[0])
        want = steps_one_by_one(tiny, one_by_one, [5, 6, 7], rows=4)
        lone = batching.decode_rows(tiny, [copy(tiny, kvs[1])], [11], rows=4)[0]
        run = copy(tiny, kvs[0])
        got = batching.decode_rows(tiny, [run, copy(tiny, kvs[1])], [[5, 6, 7], 11], rows=4)
    assert torch.equal(got[0], want) and torch.equal(got[1], lone)
    assert same_positions(run, one_by_one)


def test_the_batcher_runs_a_run_longer_than_its_rows_over_several_passes(tiny):
    kv = prefilled(tiny, 20, 3)
    with torch.inference_mode():
        one_by_one = copy(tiny, kv)
        want = steps_one_by_one(tiny, one_by_one, [5, 6, 7, 8, 9], rows=2)
        batcher = batching.StepBatcher(tiny, 2, threading.Lock())
        run = copy(tiny, kv)
        batcher.enter()
        got = batcher.step(run, [5, 6, 7, 8, 9])
        batcher.leave()
    assert torch.equal(got, want) and same_positions(run, one_by_one)
    assert (batcher.steps, batcher.row_steps) == (3, 5)
    assert batcher.summary() == "5 tokens in 3 forward passes of 2 rows (mean 1.67 rows used)"


def test_a_pass_whose_rows_are_full_does_not_wait_for_the_other_requests(tiny):
    batcher = batching.StepBatcher(tiny, 2, threading.Lock(), gather_s=60)
    batcher.enter(), batcher.enter()  # another request decodes, and has no step waiting
    start = time.perf_counter()
    with torch.inference_mode():
        batcher.step(copy(tiny, prefilled(tiny, 9, 1)), [5, 6, 7, 8])  # two passes, each full
    assert time.perf_counter() - start < 30 and batcher.steps == 2


def test_a_failed_pass_leaves_no_step_of_its_leader_waiting(tiny, monkeypatch):
    def failing(*args, **kwargs):
        raise MemoryError("no room")

    monkeypatch.setattr(batching, "decode_rows", failing)
    batcher = batching.StepBatcher(tiny, 1, threading.Lock(), gather_s=0)
    other = {"cache": None, "tokens": [4], "done": 0, "logits": None, "error": None}  # came first: fills the row
    batcher.pending.append(other)
    batcher.enter(), batcher.enter()
    with pytest.raises(MemoryError):
        batcher.step(copy(tiny, prefilled(tiny, 9, 1)), [5])
    assert batcher.pending == [] and isinstance(other["error"], MemoryError) and not batcher.leading


def test_concurrent_batched_requests_get_the_replies_they_get_alone(tiny, tokenizer, toolbox, small_chunks):
    """Free decoding (every step one token) and tool calls (forced runs fed whole), in threads that meet in
    batched steps, against the same model serving them one after another."""
    tools = toolbox.schemas()
    requests = [{"messages": [{"role": "system", "content": system_prompt(toolbox, 5)},
                              {"role": "user", "content": user_prompt(q)}], "seed": seed, "max_tokens": 24,
                 **({"tools": tools} if seed % 2 else {})} for q in QUESTIONS for seed in range(4)]

    def reply(model, r):
        return model.generate(r)["choices"][0]["message"]

    model = LocalChatModel.from_model(tiny, tokenizer, decode_rows=4)
    alone = [reply(model, r) for r in requests]
    alone_passes = model.batcher.steps
    model = LocalChatModel.from_model(tiny, tokenizer, decode_rows=4)
    together = [None] * len(requests)

    def send(i):
        together[i] = reply(model, requests[i])

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(requests))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert together == alone  # tool call ids included: of the request and its reply, not of the finishing order
    assert sum("tool_calls" in m for m in alone) == len(requests) // 2
    assert model.batcher.steps < alone_passes  # requests did share steps
    assert model.batcher.decoding == 0 and not model.batcher.pending


def test_agents_get_the_same_trajectories_with_and_without_batching(tiny, tokenizer, toolbox, small_chunks):
    """In bfloat16 with torch's attention (one request at a time's): the attention kernel, and in float32 the rows of a
    step, change the last bits (hence decode_rows and the kernel's version are in the identity)."""
    if tiny.dtype != torch.bfloat16:
        pytest.skip("in float32 the rows of a step change the last bits (hence decode_rows is in the identity)")
    plain = conversations(LocalChatModel.from_model(tiny, tokenizer), toolbox, steps=3)
    batched = LocalChatModel.from_model(tiny, tokenizer, decode_rows=4, attention="torch")
    assert conversations(batched, toolbox, steps=3) == plain


def test_decode_rows_is_part_of_the_identity_and_checked(tiny, tokenizer):
    one = LocalChatModel.from_model(tiny, tokenizer)
    four = LocalChatModel.from_model(tiny, tokenizer, decode_rows=4)
    assert one.batcher is None and four.identity["decode_rows"] == 4 and one.identity["decode_rows"] == 1
    # the grammar's forced tokens are rows of the batched steps: other bits than a prompt pass of them, so another
    # identity; free decoding has none, and its identity (and the response cache's entries) stay as they were
    free = LocalChatModel.from_model(tiny, tokenizer, decode_rows=4, constrained=False)
    assert four.identity["forced_tokens"] == "rows of the batched steps"
    assert "forced_tokens" not in one.identity and "forced_tokens" not in free.identity
    # the tool call ids are of the prompt and reply (a counter before): a constrained model's replies carry other ids
    assert one.identity["tool_call_ids"] == four.identity["tool_call_ids"] and "tool_call_ids" not in free.identity
    with pytest.raises(ValueError, match="at least 1"):
        LocalChatModel.from_model(tiny, tokenizer, decode_rows=0)
