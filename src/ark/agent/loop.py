"""One agent's trajectory (DESIGN §4.3): ask the policy, execute every tool call of its reply, repeat.

Messages are OpenAI chat format. Native tool calls get ``tool`` messages; a reply without native
calls is parsed for JSON calls in its text (the text protocol), whose results come back as ``user``
messages. An invalid call gets an error observation and the trajectory goes on; a model call that
fails after its retries ends the trajectory and is recorded.
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field

from ark.agent.prompt import system_prompt, user_prompt
from ark.tools.toolbox import AnswerState, Observation, Toolbox

NO_CALL = "Error: no tool call found in your reply. Answer with one tool call, e.g. {example}."


@dataclass
class Trajectory:
    agent: int
    messages: list[dict]
    answer: list[int] = field(default_factory=list)
    steps: int = 0
    finished: bool = False
    step_latency: list[float] = field(default_factory=list)  # model time per step (replayed from the cache)
    step_tokens: list[list[int]] = field(default_factory=list)  # [prompt, completion] per step
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    tool_calls: dict = field(default_factory=dict)
    invalid_calls: int = 0  # tool calls answered with an error observation
    replies_without_call: int = 0
    errors: list[str] = field(default_factory=list)  # model calls that failed after retries

    @property
    def latency(self) -> float:
        return round(sum(self.step_latency), 4)

    def to_dict(self) -> dict:
        return {**asdict(self), "latency": self.latency}


def parse_text_calls(text: str | None) -> list[dict]:
    """JSON objects ``{"name": ..., "arguments": {...}}`` found in free text, as OpenAI-style tool calls."""
    calls, decoder, i = [], json.JSONDecoder(), 0
    text = text or ""
    while (i := text.find("{", i)) != -1:
        try:
            obj, end = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            i += 1
            continue
        if isinstance(obj, dict) and isinstance(obj.get("name") or obj.get("tool"), str):
            args = obj.get("arguments", obj.get("args", {}))
            calls.append({"id": None, "type": "function", "function": {
                "name": obj.get("name") or obj.get("tool"),
                "arguments": args if isinstance(args, str) else json.dumps(args)}})
        i = end
    return calls


async def run_agent(session, toolbox: Toolbox, query: str, T_max: int, agent: int, text_protocol: bool = False,
                    on_event=None) -> Trajectory:
    """Run one agent; ``session.act(messages, observations)`` returns an ``LLMResult``-like reply."""
    messages = [{"role": "system", "content": system_prompt(toolbox, T_max, text_protocol)},
                {"role": "user", "content": user_prompt(query)}]
    traj, state = Trajectory(agent=agent, messages=messages), AnswerState()
    counts: Counter = Counter()
    observations: list[Observation] = []
    for step in range(T_max):
        reply = await session.act(messages, observations)
        traj.steps += 1
        traj.step_latency.append(round(reply.latency, 4))
        traj.step_tokens.append([reply.prompt_tokens, reply.completion_tokens])
        traj.prompt_tokens += reply.prompt_tokens
        traj.completion_tokens += reply.completion_tokens
        traj.cost += reply.cost
        if reply.error is not None:
            traj.errors.append(reply.error)
            _emit(on_event, "error", agent=agent, step=step, error=reply.error)
            break
        message = reply.message
        messages.append(message)
        native = message.get("tool_calls") or []
        calls = native or parse_text_calls(message.get("content"))
        _emit(on_event, "reply", agent=agent, step=step, message=message)
        if not calls:
            traj.replies_without_call += 1
            messages.append({"role": "user", "content": NO_CALL.format(example='{"name": "search_in_graph", '
                                                                              '"arguments": {"query": "..."}}')})
            observations = []
            continue
        observations = []
        for call in calls:
            name = call["function"]["name"]
            obs = toolbox.call(name, call["function"]["arguments"], state)
            counts[name] += 1
            traj.invalid_calls += obs.error is not None
            observations.append(obs)
            if native:
                messages.append({"role": "tool", "tool_call_id": call["id"], "name": name, "content": obs.text})
            else:
                messages.append({"role": "user", "content": f"Observation from {name}:\n{obs.text}"})
            _emit(on_event, "observation", agent=agent, step=step, tool=name,
                  arguments=call["function"]["arguments"], observation=obs)
            if state.finished:
                break
        if state.finished:
            break
    traj.answer, traj.finished = list(state.answer), state.finished
    traj.tool_calls, traj.cost = dict(counts), round(traj.cost, 8)
    return traj


def _emit(on_event, kind: str, **payload) -> None:
    if on_event is not None:
        on_event(kind, payload)
