"""Teacher trajectories -> SFT samples, rendered exactly as the model reads them at inference.

Each agent's message list in ``records.jsonl`` becomes one sample: ``ark.llm.protocol.chat_messages``
turns it into plain chat turns (the tool list after the system prompt, tool calls as JSON text, tool results
as observation turns) — the rendering the local model serves — and the tokenizer's chat template makes the
tokens. Labels are the assistant turns only (their text and end-of-turn token); the system prompt, the question,
every observation and the template's own tokens around a turn are masked with -100.

Label-free by construction: the input is the records (which hold no gold) and the tool schemas; no query file,
gold id or score is read, and trajectories are not filtered by correctness.
"""
from __future__ import annotations

from ark.llm.protocol import chat_messages
from ark.runs.records import QueryRecord

IGNORE = -100


def sample_turns(messages: list[dict], tools: list[dict]) -> list[dict]:
    """An agent's OpenAI messages as the chat turns the model reads and writes."""
    return chat_messages(messages, tools)


def tokenize_sample(tokenizer, turns: list[dict], max_tokens: int | None = None) -> dict | None:
    """``{"input_ids", "labels"}`` with labels on the assistant turns only; None when no assistant turn fits.

    The chat template is prefix-stable (ChatML), so the tokens of assistant turn i are those between the prompt
    rendered up to it (generation prompt included, as at inference) and the conversation rendered through it.
    A sample longer than ``max_tokens`` is cut after the last assistant turn that fits.
    """
    def ids(conversation: list[dict], generation_prompt: bool) -> list[int]:
        text = tokenizer.apply_chat_template(conversation, tokenize=False, add_generation_prompt=generation_prompt)
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    input_ids: list[int] = []
    labels: list[int] = []
    for i, turn in enumerate(turns):
        if turn["role"] != "assistant":
            continue
        prompt, through = ids(turns[:i], True), ids(turns[: i + 1], False)
        if through[: len(prompt)] != prompt or prompt[: len(input_ids)] != input_ids:
            raise ValueError("the chat template is not prefix-stable; cannot mask turns by prefix")
        if max_tokens is not None and len(through) > max_tokens:
            break
        reply = through[len(prompt):]
        end = max((j for j, t in enumerate(reply) if t == tokenizer.eos_token_id), default=len(reply) - 1)
        # the reply and its end-of-turn token; what the template adds after it is not the model's to predict
        labels += [IGNORE] * (len(prompt) - len(input_ids)) + reply[: end + 1] + [IGNORE] * (len(reply) - end - 1)
        input_ids = through
    if not input_ids:
        return None
    return {"input_ids": input_ids, "labels": labels}


def sft_samples(records: list[QueryRecord], tools: list[dict], tokenizer, max_tokens: int | None = None):
    """One sample per agent trajectory, in record order (``{"id", "agent", "input_ids", "labels"}``)."""
    for record in records:
        for agent in record.agents:
            sample = tokenize_sample(tokenizer, sample_turns(agent.messages, tools), max_tokens)
            if sample is not None:
                yield {"id": record.id, "agent": agent.agent, **sample}
