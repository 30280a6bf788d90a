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

from typing import TYPE_CHECKING

import bisect

from ark.llm.protocol import chat_messages

if TYPE_CHECKING:
    from ark.agent.records import QueryRecord

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


def distinct(samples: list[dict]) -> list[dict]:
    """``samples`` less those whose query already has a sample of the same tokens (the sampled teacher repeated
    itself), in order."""
    seen, out = set(), []
    for s in samples:
        key = (s["id"], tuple(s["input_ids"]))
        if key not in seen:
            seen.add(key)
            out.append(s)
    return out


def pack_bins(lengths: list[int], capacity: int) -> list[list[int]]:
    """Best-fit decreasing: indices of ``lengths`` grouped into bins of at most ``capacity`` tokens each."""
    if any(n > capacity for n in lengths):
        raise ValueError(f"a sample of {max(lengths)} tokens does not fit a pack of {capacity}")
    free: list[tuple[int, int]] = []  # (tokens left, bin), sorted
    bins: list[list[int]] = []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        at = bisect.bisect_left(free, (lengths[i], -1))
        if at == len(free):
            bins.append([])
            left, b = capacity, len(bins) - 1
        else:
            left, b = free.pop(at)
        bins[b].append(i)
        bisect.insort(free, (left - lengths[i], b))
    return bins


def pack(samples: list[dict], capacity: int) -> list[dict]:
    """Samples -> rows of at most ``capacity`` tokens, each ``{"input_ids", "labels", "seq_lengths"}``.

    A row is its samples end to end; ``seq_lengths`` lets the collator restart the position ids at every sample,
    and transformers then masks attention across samples (every token counted once, no padding).
    """
    rows = []
    for group in pack_bins([len(s["input_ids"]) for s in samples], capacity):
        members = [samples[i] for i in sorted(group)]
        rows.append({"input_ids": [t for s in members for t in s["input_ids"]],
                     "labels": [t for s in members for t in s["labels"]],
                     "seq_lengths": [len(s["input_ids"]) for s in members]})
    return rows


def shared_prefix(samples: list[dict]) -> dict:
    """A batch of samples as the prefix they all start with and what follows it in each:
    ``{"prefix_ids", "suffixes": [{"input_ids", "labels"}, ...]}``.

    The prefix (the system prompt and tool list, and the question where the samples share it) ends at least one
    token before the first labelled token of any sample, so each reply's first token is predicted from a suffix
    position and no labelled token is shared: the loss over the suffixes is the loss over the whole samples.
    """
    ids = [s["input_ids"] for s in samples]
    n = min(len(x) for x in ids)
    common = next((i for i in range(n) if any(x[i] != ids[0][i] for x in ids)), n)
    labelled = min(next((i for i, t in enumerate(s["labels"]) if t != IGNORE), len(s["labels"])) for s in samples)
    cut = max(0, min(common, labelled - 1))
    return {"prefix_ids": ids[0][:cut],
            "suffixes": [{"input_ids": s["input_ids"][cut:], "labels": s["labels"][cut:]} for s in samples]}
