"""The embedded model's key/value memory: the prefix tree stores a chunk once however many prompts share it and
stays under its bound; the budget makes requests wait instead of growing memory; a stopping server ends the
requests under way. A tiny random Llama with the real SmolLM2 tokenizer (a test double, not the product's model)."""
import threading
import time

import pytest
import torch

import ark.llm.local as local_module
from ark.llm.local import KVBudget, LocalChatModel, PrefixCache
from ark.llm.server import HTTPError

C = 4  # the chunk of these tests


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    monkeypatch.setattr(local_module, "PREFILL_CHUNK", C)


def cache_of(ids: list[int]):
    """What ``PrefixCache.put`` reads a request's positions with, for a one-layer model whose key and value at a
    position are the token there (so a lookup can be checked)."""
    t = torch.tensor(ids, dtype=torch.float32).reshape(1, len(ids), 1)
    return lambda start, end: [(t[:, start:end].clone(), t[:, start:end] * 10)]


def held(pieces: list) -> list[int]:
    """The tokens of a lookup's pieces (one layer)."""
    (layer,) = pieces
    k, v = torch.cat([k for k, _ in layer], 1), torch.cat([v for _, v in layer], 1)
    assert torch.equal(v, k * 10)
    return [int(x) for x in k.flatten()]


def test_a_shared_prefix_is_stored_once_and_found_up_to_a_chunk_before_the_end():
    pc = PrefixCache(max_tokens=100)
    preamble = list(range(8))
    pc.put(preamble + [20, 21, 22, 23], cache_of(preamble + [20, 21, 22, 23, 99]))
    pc.put(preamble + [30, 31, 32, 33], cache_of(preamble + [30, 31, 32, 33]))
    assert pc.tokens == 16  # the preamble's two chunks once, and one chunk for each question
    pieces, n, chunks = pc.longest_prefix(preamble + [30, 31, 32, 33, 5])
    assert n == 12 and held(pieces) == preamble + [30, 31, 32, 33] and len(chunks) == 3
    assert pc.longest_prefix(preamble + [30, 31, 32, 33])[1] == 8  # a token is always left to feed
    assert pc.longest_prefix(preamble[:4] + [7, 7, 7, 7, 7])[1] == 4
    assert pc.longest_prefix([9] * 20) == ([], 0, [])


def test_reused_up_to_any_position_a_prompt_is_kept_whole_and_found_to_where_it_differs():
    pc = PrefixCache(max_tokens=100, any_position=True)
    first = list(range(10))  # two whole chunks and a short one
    assert pc.kept(first) == first and PrefixCache().kept(first) == first[:8]
    pc.put(first, cache_of(first))
    assert pc.tokens == 10
    pieces, n, _ = pc.longest_prefix(first[:9] + [50, 51])  # into the short chunk
    assert n == 9 and held(pieces) == first[:9]
    assert pc.longest_prefix(first[:6] + [50])[1] == 6  # into a whole chunk
    assert pc.longest_prefix(first)[1] == 9  # a token is always left to feed
    longer = first + [10, 11, 12, 13]  # its third chunk is whole and starts with the short one: it replaces it
    pc.put(longer, cache_of(longer))
    assert pc.tokens == 14 and held(pc.longest_prefix(longer + [1])[0]) == longer
    pc.put(first, cache_of(first))  # a short chunk that a kept one starts with adds nothing
    assert pc.tokens == 14
    other = first[:8] + [60]
    pc.put(other, cache_of(other))
    assert pc.tokens == 15 and pc.longest_prefix(other + [1])[1] == 9 and pc.longest_prefix(first[:9] + [7])[1] == 9


def test_the_tree_drops_least_recently_used_leaves_to_stay_under_its_bound():
    pc = PrefixCache(max_tokens=12)
    a, b = [0, 1, 2, 3, 10, 11, 12, 13], [0, 1, 2, 3, 20, 21, 22, 23]
    pc.put(a, cache_of(a))
    pc.put(b, cache_of(b))
    assert pc.tokens == 12
    pc.longest_prefix(a + [0])  # a used last: b's leaf goes first
    c = [0, 1, 2, 3, 30, 31, 32, 33]
    pc.put(c, cache_of(c))
    assert pc.tokens == 12 and pc.longest_prefix(b + [0])[1] == 4 and pc.longest_prefix(a + [0])[1] == 8
    pc.shrink(0)
    assert pc.tokens == 0 and pc.longest_prefix(a + [0]) == ([], 0, [])


def test_a_kept_chunk_is_a_copy_that_later_writes_do_not_reach():
    ids = list(range(8))
    t = torch.tensor(ids, dtype=torch.float32).reshape(1, 8, 1)
    pc = PrefixCache()
    pc.put(ids, lambda start, end: [(t[:, start:end].clone(), t[:, start:end] * 10)])
    t.zero_()
    pieces, n, _ = pc.longest_prefix(ids + [1])
    assert n == 8 and held(pieces) == ids


def test_a_chunk_that_a_request_holds_is_not_dropped_until_it_lets_go():
    pc = PrefixCache(max_tokens=8)
    a, b = [0, 1, 2, 3, 10, 11, 12, 13], [0, 1, 2, 3, 20, 21, 22, 23]
    pc.put(a, cache_of(a))
    _, n, chunks = pc.longest_prefix(a + [0])
    PrefixCache.hold(chunks)
    pc.put(b, cache_of(b))  # over the bound: b's own chunk goes, a's is held
    assert n == 8 and pc.tokens == 8 and pc.longest_prefix(a + [0])[1] == 8 and pc.longest_prefix(b + [0])[1] == 4
    pc.shrink(0)  # nothing to drop but held chunks: it stops there
    assert pc.tokens == 8
    PrefixCache.hold(chunks, -1)
    pc.shrink(0)
    assert pc.tokens == 0


def test_a_request_gives_back_what_it_reads_from_the_kept_prompts():
    budget = KVBudget(160)  # requests may reserve 120
    with budget.reserve(100) as reservation:
        reservation.give_back(60)
        assert budget.reserved == 40
        with budget.reserve(80):  # fits now
            assert budget.reserved == 120
    assert budget.reserved == 0


def test_the_budget_makes_a_request_wait_until_the_tokens_fit():
    budget = KVBudget(160)  # requests may reserve 120
    order, inside, done = [], threading.Event(), threading.Event()

    def second():
        with budget.reserve(50):
            order.append("second in")
            inside.set()
            done.wait(5)

    with budget.reserve(80):
        t = threading.Thread(target=second)
        t.start()
        time.sleep(0.2)
        order.append("first out")
    assert inside.wait(5) and order == ["first out", "second in"] and budget.reserved == 50
    done.set()
    t.join(5)
    assert budget.reserved == 0


def test_a_large_request_is_not_overtaken_by_smaller_ones_that_come_after_it():
    budget = KVBudget(160)  # requests may reserve 120
    order = []

    def ask(name: str, n: int, hold: float):
        with budget.reserve(n):
            order.append(name)
            time.sleep(hold)

    first = threading.Thread(target=ask, args=("first", 60, 0.3))
    first.start()
    time.sleep(0.05)
    large = threading.Thread(target=ask, args=("large", 120, 0))
    large.start()
    time.sleep(0.05)
    small = threading.Thread(target=ask, args=("small", 40, 0))  # it fits beside the first, but comes after large
    small.start()
    for t in (first, large, small):
        t.join(5)
    assert order == ["first", "large", "small"] and budget.reserved == 0


def test_kept_prompts_and_requests_in_flight_stay_under_the_bound_together():
    budget = KVBudget(64)
    pc = PrefixCache(lambda: budget.tokens - budget.reserved)
    with budget.reserve(40):  # a request in flight: the kept prompts get 24 tokens, whole chunks of 4
        for q in range(5):
            ids = [100 + q] * 8
            pc.put(ids, cache_of(ids))
            assert pc.tokens + budget.reserved <= budget.tokens
    assert pc.tokens == 24


def test_a_stopping_budget_turns_waits_into_errors():
    budget = KVBudget(14)  # requests may reserve 10
    errors = []

    def wait():
        try:
            with budget.reserve(10):
                pass
        except HTTPError as e:
            errors.append(e.status)

    with budget.reserve(10):
        t = threading.Thread(target=wait)
        t.start()
        time.sleep(0.1)
        budget.stop()
        t.join(5)
    assert errors == [503]


@pytest.fixture(scope="module")
def tiny(tokenizer):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=128, max_position_embeddings=2048)
    return LlamaForCausalLM(config).eval()


def test_a_budget_under_one_context_window_is_refused(tiny, tokenizer):
    # 2 layers x 2 heads x 16 dims x 2 (keys, values) x 4 bytes = 512 bytes a position: 2 MB hold 4,096, of which
    # the requests in flight may reserve three quarters
    kv = LocalChatModel.from_model(tiny, tokenizer, kv_memory_mb=2).kv
    assert (kv.tokens, kv.limit) == (4096, 3072)
    tiny.config.max_position_embeddings = 4096
    try:
        with pytest.raises(ValueError, match="lets a request hold 3072 positions of key/values; the context window "
                                             "is 4096 [(]3 MB at least, float32[)]"):
            LocalChatModel.from_model(tiny, tokenizer, kv_memory_mb=2)
    finally:
        tiny.config.max_position_embeddings = 2048


@pytest.mark.parametrize("decode_rows", [1, 2])
def test_cancel_ends_a_request_under_way_at_its_next_step(tiny, tokenizer, decode_rows, monkeypatch):
    model = LocalChatModel.from_model(tiny, tokenizer, constrained=False, decode_rows=decode_rows)
    steps, forward, prefill = [], tiny.forward, local_module.batching.prefill

    def slow(run):
        def counted(*args, **kwargs):
            steps.append(1)
            time.sleep(0.02)
            return run(*args, **kwargs)
        return counted

    tiny.forward = slow(forward)  # a reply's single-token passes, one request at a time
    monkeypatch.setattr(local_module.batching, "prefill", slow(prefill))  # the prompt's passes
    result = {}

    def ask():
        try:
            model.generate({"messages": [{"role": "user", "content": "hello " * 20}], "max_tokens": 400,
                            "temperature": 1.0})
        except HTTPError as e:
            result["status"] = e.status

    try:
        t = threading.Thread(target=ask)
        t.start()
        while len(steps) < 3:
            time.sleep(0.01)
        model.cancel()
        t.join(10)
    finally:
        del tiny.forward
    assert result == {"status": 503} and len(steps) < 100 and model.kv.reserved == 0


@pytest.mark.e2e  # runs with the embedded model
def test_a_runs_identity_holds_the_kernel_and_not_the_memory_bound():
    from ark.build import spec
    from ark.runs.identity import identity, identity_hash
    from tests.conftest import compose_cfg

    def ident(*overrides):
        return identity(spec(compose_cfg(["backbone=local_smollm2", "backbone.local.dtype=float32", *overrides])),
                        "evaluate")

    local = ident()["backbone"]["local"]
    assert "kv_memory_mb" not in local and local["linear"] == "onednn"
    assert identity_hash(ident("backbone.local.kv_memory_mb=512")) == identity_hash(ident())
    assert ident("backbone.local.linear=torch")["backbone"]["local"]["linear"] == "torch"
    with pytest.raises(Exception, match="backbone.local.linear must be one of onednn, torch"):
        ident("backbone.local.linear=mkl")


def test_an_idle_model_shrinks_its_kept_prompts_under_its_lock(tiny, tokenizer):
    """What ``ark serve`` calls once a burst is over: the kept prompts down to the tokens asked (``PrefixCache.shrink``,
    least recently used first), never while a forward pass holds the model's lock."""
    model = LocalChatModel.from_model(tiny, tokenizer, constrained=False)
    for text in ("first question " * 5, "second question " * 5):
        model.generate({"messages": [{"role": "user", "content": text}], "max_tokens": 2, "temperature": 0})
    assert model.prefix_cache.tokens > 2 * C
    done = threading.Event()
    with model._lock:  # a forward pass under way: the shrink waits for it
        t = threading.Thread(target=lambda: (model.shrink_kept(2 * C), done.set()))
        t.start()
        assert not done.wait(0.2)
    t.join(10)
    assert done.is_set() and model.prefix_cache.tokens <= 2 * C
