"""The embedded model's speed-ups: dtype from the CPU, and the prefix cache (key/value caches reused across an
agent's steps), which must not change a reply. A tiny random Llama with the real SmolLM2 tokenizer, as in
``test_local_model``; bfloat16 too, where a prefill split differently changes the last bits."""
import threading

import pytest
import torch

import ark  # noqa: F401  (offline environment defaults)
import ark.llm.local as local_module
import ark.llm.weights as weights
from ark.agent.prompt import system_prompt, user_prompt
from ark.llm.local import LocalChatModel, PrefixCache
from ark.build import spec
from ark.runs.identity import identity, identity_hash
from ark.tools.toolbox import AnswerState, Toolbox
from tests.conftest import compose_cfg
from tests.helpers import tiny_graph, tiny_index

pytestmark = pytest.mark.e2e  # whole module: see pyproject's e2e marker

QUESTIONS = ["Which gene is associated with Marfan syndrome?", "Which phenotypes does a lens dislocation cause?"]


@pytest.fixture(scope="module", params=["float32", "bfloat16"])
def tiny(request, tokenizer):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=128)
    return LlamaForCausalLM(config).to(getattr(torch, request.param)).eval()


@pytest.fixture(scope="module")
def toolbox():
    g = tiny_graph()
    return Toolbox(g, tiny_index(g))


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(local_module, "PREFILL_CHUNK", 32)  # many chunk boundaries in a short conversation


def chunks(cache: PrefixCache) -> list:
    """Every chunk the prefix tree holds, parents before children."""
    out, stack = [], [cache.root]
    while stack:
        node = stack.pop()
        out += [node] if node is not cache.root else []
        stack.extend(node.children.values())
    return out


def recorded(model, monkeypatch) -> tuple[list[int], list[torch.Tensor]]:
    """(tokens of every forward pass of ``model``, the logits of every decoding step) from now on."""
    fed, logits, forward, decode = [], [], model.forward, local_module.decode_tool_call
    prefill = local_module.batching.prefill

    def counting_forward(*args, **kwargs):
        fed.append(kwargs["input_ids"].shape[1])
        return forward(*args, **kwargs)

    def counting_prefill(m, cache, ids, window):
        fed.append(len(ids))
        return prefill(m, cache, ids, window)

    monkeypatch.setattr(local_module.batching, "prefill", counting_prefill)

    def recording_decode(step, *args):
        return decode(lambda ids: logits.append(step(ids)) or logits[-1], *args)

    monkeypatch.setattr(model, "forward", counting_forward)
    monkeypatch.setattr(local_module, "decode_tool_call", recording_decode)
    return fed, logits


def conversations(model: LocalChatModel, toolbox: Toolbox, steps: int = 4, order=None) -> dict:
    """Agents' trajectories, their steps interleaved (``order``: agent indices, one per step; default round-robin):
    the replies of each agent, in order. Observations are the tools' real ones."""
    tools = toolbox.schemas()
    agents = [{"messages": [{"role": "system", "content": system_prompt(toolbox, steps)},
                            {"role": "user", "content": user_prompt(q)}], "state": AnswerState(), "replies": []}
              for q in QUESTIONS for _ in range(2)]
    for i in order or [i for _ in range(steps) for i in range(len(agents))]:
        a = agents[i]
        reply = model.generate({"messages": a["messages"], "tools": tools, "temperature": 1.0, "seed": i,
                                "max_tokens": 40})
        message = reply["choices"][0]["message"]
        a["replies"].append(message)
        call = message["tool_calls"][0]
        obs = toolbox.call(call["function"]["name"], call["function"]["arguments"], a["state"])
        a["messages"] += [message, {"role": "tool", "tool_call_id": call["id"], "content": obs.text}]
    return {i: [r["tool_calls"][0]["function"] for r in a["replies"]] for i, a in enumerate(agents)}


def test_prefix_cache_gives_the_same_replies_and_prefills_less(tiny, tokenizer, toolbox, small_chunks, monkeypatch):
    fed, logits = recorded(tiny, monkeypatch)
    plain = conversations(LocalChatModel.from_model(tiny, tokenizer, prefix_cache=False), toolbox)
    fed_plain, logits_plain = sum(fed), logits[:]
    fed.clear()
    logits.clear()
    reused = conversations(LocalChatModel.from_model(tiny, tokenizer), toolbox)
    assert reused == plain
    assert len(logits) == len(logits_plain) and all(map(torch.equal, logits, logits_plain))  # to the last bit
    assert sum(fed) < fed_plain / 2


def test_reused_up_to_any_position_the_replies_are_the_same_and_less_is_prefilled(tiny, tokenizer, toolbox,
                                                                                   small_chunks, monkeypatch):
    model = LocalChatModel.from_model(tiny, tokenizer)
    if not model.prefix_cache.any_position:
        pytest.skip(f"{tiny.dtype}: a pass's rows depend on where it began on this CPU (batching.reuse_granularity)")
    fed, logits = recorded(tiny, monkeypatch)
    anywhere = conversations(model, toolbox)
    fed_anywhere, logits_anywhere = sum(fed), logits[:]
    fed.clear()
    logits.clear()
    model.prefix_cache = PrefixCache(any_position=False)
    assert conversations(model, toolbox) == anywhere
    assert len(logits) == len(logits_anywhere) and all(map(torch.equal, logits, logits_anywhere))
    assert fed_anywhere < sum(fed)


def test_replies_do_not_depend_on_the_order_of_requests(tiny, tokenizer, toolbox, small_chunks):
    """Whatever entries the prefix cache holds when a request comes, the reply is the same."""
    model = LocalChatModel.from_model(tiny, tokenizer)
    model.prefix_cache = PrefixCache(max_tokens=4 * 32)  # less than the agents' conversations: chunks are evicted
    round_robin = conversations(model, toolbox, steps=3)
    model.prefix_cache = PrefixCache()
    one_by_one = conversations(model, toolbox, steps=3, order=[i for i in range(4) for _ in range(3)])
    assert one_by_one == round_robin


def test_concurrent_requests_get_the_replies_of_sequential_ones(tiny, tokenizer, toolbox, small_chunks):
    tools = toolbox.schemas()
    model = LocalChatModel.from_model(tiny, tokenizer)
    requests = [{"messages": [{"role": "system", "content": system_prompt(toolbox, 5)},
                              {"role": "user", "content": user_prompt(q)}], "tools": tools, "seed": seed,
                 "max_tokens": 30} for q in QUESTIONS for seed in range(3)]
    sequential = [model.generate(r)["choices"][0]["message"]["tool_calls"][0]["function"] for r in requests]
    replies = [None] * len(requests)

    def send(i):
        replies[i] = model.generate(requests[i])["choices"][0]["message"]["tool_calls"][0]["function"]

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(requests))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert replies == sequential


def test_an_entry_is_never_written_by_the_requests_reusing_it(tiny, tokenizer, toolbox, small_chunks):
    model = LocalChatModel.from_model(tiny, tokenizer)
    request = {"messages": [{"role": "system", "content": system_prompt(toolbox, 5)},
                            {"role": "user", "content": user_prompt(QUESTIONS[0])}],
               "tools": toolbox.schemas(), "max_tokens": 30}
    model.generate(request)
    kept = chunks(model.prefix_cache)
    before = [[(k.clone(), v.clone()) for k, v in c.kv] for c in kept]
    for seed in range(3):
        model.generate(request | {"seed": seed})
    assert chunks(model.prefix_cache) == kept  # the same prompt: nothing added
    assert all(torch.equal(k, k0) and torch.equal(v, v0)
               for c, kv0 in zip(kept, before) for (k, v), (k0, v0) in zip(c.kv, kv0))


@pytest.mark.parametrize("decode_rows", [1, 2])
def test_a_prompt_is_kept_once_prefilled_and_stays_intact(tiny, tokenizer, toolbox, small_chunks, monkeypatch,
                                                          decode_rows):
    """Requests arriving while a request decodes reuse its prompt (the queries in flight start together, and their
    first prompts share the system prompt); the entry holds views that the decoding must not overwrite."""
    model = LocalChatModel.from_model(tiny, tokenizer, decode_rows=decode_rows)
    request = {"messages": [{"role": "system", "content": system_prompt(toolbox, 5)},
                            {"role": "user", "content": user_prompt(QUESTIONS[0])}],
               "tools": toolbox.schemas(), "max_tokens": 30}
    seen, decode = [], local_module.decode_tool_call

    def watching(step, *args):
        def watched(ids):
            logits = step(ids)
            if not seen:  # right after the prefill, before any reply token
                kept = chunks(model.prefix_cache)
                seen.append((model.prefix_cache.tokens, kept, [[(k.clone(), v.clone()) for k, v in c.kv] for c in kept],
                             model.kv.reserved))
            return logits
        return decode(watched, *args)

    monkeypatch.setattr(local_module, "decode_tool_call", watching)
    reply = model.generate(request)
    prompt = reply["usage"]["prompt_tokens"]
    (n, kept, at_prefill, reserved), = seen
    # kept whole (with the forced tokens that open a call, fed with it) where reused up to any position
    assert n >= prompt if model.prefix_cache.any_position else n == prompt // 32 * 32 > 0
    assert all(torch.equal(k, k0) and torch.equal(v, v0)
               for c, kv0 in zip(kept, at_prefill) for (k, v), (k0, v0) in zip(c.kv, kv0))
    assert reply["usage"]["completion_tokens"] > 1  # it went on decoding after the entry was kept
    if model.batcher is not None and model.batcher.attention is not None:  # it reads what was kept in place
        assert reserved <= prompt - n + 30 + 8  # its prompt's rest, the reply cap, the tokens fed with the prompt
    else:
        assert reserved == prompt + 30


def test_kernels_limited_to_avx2_count_as_no_native_bf16(monkeypatch):
    """The simulation of an AVX2-only CPU (benchmarks/README.md) must take the float32 path `auto` takes there."""
    import ark.machine as machine

    monkeypatch.setattr(machine, "cpu_flags", lambda: frozenset({"avx2", "avx512_bf16", "amx_bf16"}))
    for name in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA"):
        monkeypatch.delenv(name, raising=False)
    assert weights.cpu_has_bf16()
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert not weights.cpu_has_bf16() and weights.resolve_dtype("auto") == "float32"
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA")
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    assert not weights.cpu_has_bf16()
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx512")
    assert weights.cpu_has_bf16()


def test_auto_dtype_follows_the_cpu(monkeypatch):
    assert isinstance(weights.cpu_has_bf16(), bool)
    monkeypatch.setattr(weights, "cpu_has_bf16", lambda: True)
    assert weights.resolve_dtype("auto") == "bfloat16" and weights.torch_dtype("auto") == torch.bfloat16
    monkeypatch.setattr(weights, "cpu_has_bf16", lambda: False)
    assert weights.resolve_dtype("auto") == "float32" and weights.torch_dtype("auto") == torch.float32
    assert weights.resolve_dtype("bfloat16") == "bfloat16"


def test_run_identity_holds_the_resolved_dtype(monkeypatch):
    def ident(*overrides):
        return identity(spec(compose_cfg(["backbone=local_smollm2", *overrides])), "evaluate")

    assert compose_cfg(["backbone=local_smollm2"]).backbone.local.dtype == "auto"
    for native, resolved in ((True, "bfloat16"), (False, "float32")):
        monkeypatch.setattr(weights, "cpu_has_bf16", lambda: native)
        assert ident()["backbone"]["local"]["dtype"] == resolved
        assert identity_hash(ident()) == identity_hash(ident(f"backbone.local.dtype={resolved}"))
