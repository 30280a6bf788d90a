"""benchmarks/embedded_split.py's timers on a tiny random Llama (a test double of SmolLM2) with the real tokenizer:
each part counts what the model did, and the model's code is as before once the block ends."""
import threading

import pytest

import ark  # noqa: F401  (offline environment defaults)
from ark.agent.prompt import system_prompt, user_prompt
from ark.llm.local import LocalChatModel
from tests.conftest import load_benchmark
from tests.test_local_speed import QUESTIONS, tiny, toolbox  # noqa: F401  (fixtures)




def request(toolbox, question, seed, constrained_tools=True):
    messages = [{"role": "system", "content": system_prompt(toolbox, 4)}, {"role": "user", "content": user_prompt(question)}]
    body = {"messages": messages, "temperature": 1.0, "seed": seed, "max_tokens": 30}
    return {**body, "tools": toolbox.schemas()} if constrained_tools else body


def test_the_parts_of_one_tool_call(tiny, tokenizer, toolbox):
    bench = load_benchmark("embedded_split")
    setup, stepper = LocalChatModel._setup, LocalChatModel._stepper
    with bench.attached(bench.Split()) as split:
        model = LocalChatModel.from_model(tiny, tokenizer, prefix_cache=False)
        usage = model.generate(request(toolbox, QUESTIONS[0], 0))["usage"]
    assert LocalChatModel._setup is setup and LocalChatModel._stepper is stepper  # undone
    assert "forward" not in tiny.__dict__
    # the whole prompt (no prefix cache), and the forced tokens that open a call, fed with it
    opening = split.tokens["prefill"] - usage["prompt_tokens"]
    assert 0 < opening < usage["completion_tokens"]
    # then every pass feeds what was decoded since; the last token is never fed
    fed = split.tokens["forced"] + split.tokens["single"]
    assert 0 < fed and opening + fed < usage["completion_tokens"]
    assert split.calls["sampling"] > 0 and split.calls["grammar"] > split.calls["sampling"]
    assert split.calls["batched"] == 0
    table = {row["part"]: row for row in split.table(wall=100.0)}
    assert table["rest"]["seconds"] == pytest.approx(100.0 - sum(split.seconds[p] for p in bench.PARTS), abs=0.01)


def test_batched_steps_count_their_rows(tiny, tokenizer, toolbox):
    bench = load_benchmark("embedded_split")
    with bench.attached(bench.Split()) as split:
        model = LocalChatModel.from_model(tiny, tokenizer, decode_rows=2)
        replies = [None, None]

        def ask(i):
            replies[i] = model.generate(request(toolbox, QUESTIONS[i], i, constrained_tools=False))

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    decoded = sum(r["usage"]["completion_tokens"] for r in replies)
    assert split.calls["single"] == 0 and split.calls["forced"] == 0
    # free decoding: every token after a request's first is a batched row (a stop token ends without one)
    assert 0 < split.tokens["batched"] <= decoded and split.calls["batched"] <= split.tokens["batched"]
    assert split.calls["prefill"] >= 2 and split.calls["grammar"] == 0
    reuse = split.reuse()
    assert reuse["requests"] == 2 and reuse["prompt_tokens"] == sum(r["usage"]["prompt_tokens"] for r in replies)
    assert 1 <= reuse["requests_finding_nothing"] <= 2 and reuse["found_in_prefix_cache"] < reuse["prompt_tokens"]
