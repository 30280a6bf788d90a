"""One agent's trajectory (DESIGN §4.3): ask the policy, execute every tool call of its reply, repeat.

Messages are OpenAI chat format. Native tool calls get ``tool`` messages; a reply without native
calls is parsed for JSON calls in its text (the text protocol), whose results come back as ``user``
messages. An invalid call gets an error observation and the trajectory goes on; a model call that
fails after its retries ends the trajectory and is recorded, and so does a conversation that has grown past the
backbone's context window (``context_full``: the policy makes no call that could not fit). With ``idle_limit``, an
agent whose last ``idle_limit`` replies made no valid tool call stops (``idle_stop``): a model that cannot use the
tools does not spend the rest of its budget proving it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import time
from collections import Counter

from ark.agent.prompt import system_prompt, user_prompt
from ark.llm.protocol import no_call_text, observation_text, parse_text_calls
from ark.agent.records import Trajectory
from ark.tools.toolbox import AnswerState

if TYPE_CHECKING:
    from ark.tools.toolbox import Observation, Toolbox


async def run_agent(session, toolbox: Toolbox, query: str, *, T_max: int, agent: int, text_protocol: bool = False,
                    on_event=None, prompt: str = "ark", idle_limit: int | None = None) -> Trajectory:
    """Run one agent; ``session.act(messages, observations)`` returns an ``LLMResult``-like reply."""
    messages = [{"role": "system", "content": system_prompt(toolbox, T_max, text_protocol, prompt)},
                {"role": "user", "content": user_prompt(query)}]
    traj, state = Trajectory(agent=agent, messages=messages), AnswerState()
    counts: Counter = Counter()
    observations: list[Observation] = []
    idle = 0  # replies in a row without a valid tool call
    for step in range(T_max):
        _emit(on_event, "call", agent=agent, step=step)
        reply = await session.act(messages, observations)
        if reply.context_full:
            traj.context_full = True
            _emit(on_event, "context_full", agent=agent, step=step)
            break
        traj.steps += 1
        traj.model_time.append(round(reply.latency, 4))
        traj.tokens.append([reply.prompt_tokens, reply.completion_tokens])
        traj.cost += reply.cost
        traj.replayed_steps += reply.cached
        traj.tool_time.append(0.0)
        if reply.error is not None:
            traj.errors.append(reply.error)
            _emit(on_event, "error", agent=agent, step=step, error=reply.error)
            break
        message = _capped(reply.message, toolbox.config.observation_chars)
        messages.append(message)
        native = message.get("tool_calls") or []
        calls = native or parse_text_calls(message.get("content"))
        _emit(on_event, "reply", agent=agent, step=step, message=message)
        observations = []
        if not calls:
            traj.replies_without_call += 1
            messages.append({"role": "user", "content": no_call_text(*toolbox.example_call)})
        for call in calls:
            name = call["function"]["name"]
            start = time.perf_counter()
            obs = toolbox.call(name, call["function"]["arguments"], state)
            traj.tool_time[-1] += time.perf_counter() - start
            counts[name] += 1
            traj.invalid_calls += obs.error is not None
            traj.tool_failures += obs.tool_failed
            observations.append(obs)
            if native:
                messages.append({"role": "tool", "tool_call_id": call["id"], "name": name, "content": obs.text})
            else:
                messages.append({"role": "user", "content": observation_text(name, obs.text)})
            _emit(on_event, "observation", agent=agent, step=step, tool=name,
                  arguments=call["function"]["arguments"], observation=obs)
            if state.finished:
                break
        if state.finished:
            break
        idle = 0 if any(o.error is None for o in observations) else idle + 1
        if idle_limit is not None and idle >= idle_limit:
            traj.idle_stop = True
            break
    traj.answer, traj.finished = list(state.answer), state.finished
    traj.tool_calls, traj.cost = dict(counts), round(traj.cost, 8)
    traj.tool_time = [round(t, 6) for t in traj.tool_time]
    return traj


def _capped(message: dict, cap: int) -> dict:
    """A runaway reply (its text or a call's arguments over ``cap`` characters) cut, so that it is neither stored
    whole nor sent back on every later step; the tools refuse the cut arguments. Replies under the cap are kept."""
    def cut(text):
        return text if not isinstance(text, str) or len(text) <= cap else \
            text[:cap] + f"\n... (reply cut at {cap:,} of {len(text):,} characters)"

    calls = message.get("tool_calls") or []
    if len(message.get("content") or "") <= cap and all(len(c["function"].get("arguments") or "") <= cap
                                                        for c in calls):
        return message
    out = {**message, "content": cut(message.get("content"))}
    if calls:
        out["tool_calls"] = [{**c, "function": {**c["function"], "arguments": cut(c["function"].get("arguments"))}}
                             for c in calls]
    return out


def _emit(on_event, kind: str, **payload) -> None:
    if on_event is not None:
        on_event(kind, payload)
