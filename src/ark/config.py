"""The project's configuration: where ``conf/`` is, composing it (for the CLI, the report, tests and benchmarks;
each stage is a Hydra entry point over the same tree), and building the object a config node names (``make``)."""
from __future__ import annotations

import re
from pathlib import Path

from ark.errors import UserError

CONF = Path(__file__).resolve().parents[2] / "conf"


def compose(overrides=(), hydra_config: bool = False):
    """``conf/config.yaml`` with ``overrides``; inside a running Hydra app (a stage), through that app's config. A
    config that cannot be composed (a key that is not there, a group option with no file) is one ``UserError``."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        if GlobalHydra.instance().is_initialized():
            return hydra_compose("config", overrides=list(overrides), return_hydra_config=hydra_config)
        with initialize_config_dir(str(CONF), version_base="1.3"):
            return hydra_compose("config", overrides=list(overrides), return_hydra_config=hydra_config)
    except (HydraException, OmegaConfBaseException) as e:
        raise UserError(composition_error(e)) from None


def composition_error(e: Exception) -> str:
    """Hydra's multi-line message (and its cause's first line) on one line."""
    lines = []
    for line in str(e).splitlines():
        if line.startswith("Config search path"):
            break
        if line.strip():
            lines.append(line.strip())
    cause = str(e.__cause__).splitlines()[0] if e.__cause__ is not None and str(e.__cause__) else ""
    text = " ".join(lines) or type(e).__name__
    return f"{text} ({cause})" if cause else text


TAKES_VALUE = {"--cfg", "-c", "--package", "-p", "--config-path", "-cp", "--config-name", "-cn", "--config-dir", "-cd",
               "--experimental-rerun"}


OTHER_CONFIG = {"--config-path", "-cp", "--config-name", "-cn", "--config-dir", "-cd"}


def check_overrides(args) -> None:
    """Command-line overrides checked before Hydra composes them: a syntax error, a config group option that has no
    file, or a key the config does not have is one ``UserError`` line (Hydra's own message spans several lines and
    exits 1). A sweep's values are checked by the runs it starts."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    multirun = any(a in ("-m", "--multirun") for a in args)
    own_config = any(a in OTHER_CONFIG for a in args)
    kept, skip = [], False
    for a in args:  # Hydra's own flags, and the value of those that take one (--cfg job, -cn name, ...)
        if not skip and not a.startswith("-"):
            kept.append(a)
        skip = a in TAKES_VALUE
    args = kept
    try:
        overrides = OverridesParser.create().parse_overrides(args)
    except HydraException as e:
        first = next((line for line in str(e).splitlines() if line.strip()), "")
        raise UserError(f"bad override ({first.strip()}); the grammar: "
                        "https://hydra.cc/docs/advanced/override_grammar/basic/") from None
    for o in overrides:
        group = o.key_or_group
        if not o.is_delete():
            check_not_secret(group, o)
        if o.is_sweep_override() and not multirun:
            raise UserError(f"{o.input_line} sweeps over several values: add --multirun (-m) to run each")
        if o.is_delete() or group.startswith("hydra") or not (CONF / group).is_dir():
            continue
        values = list(o.sweep_string_iterator()) if o.is_sweep_override() else [o.get_value_element_as_str()]
        for value in values:
            if value != "null" and not (CONF / group / f"{value}.yaml").is_file():
                options = sorted(str(p.relative_to(CONF / group).with_suffix("")) for p in (CONF / group).rglob("*.yaml"))
                raise UserError(f"{group}={value}: no such option (conf/{group}/{value}.yaml); options: "
                                f"{', '.join(options)}")
    if not own_config:  # a key that is not there: composed now, one line
        compose([o.input_line for o in overrides if not o.is_sweep_override()
                 and not o.key_or_group.startswith("hydra")])


# litellm.completion's arguments that the client sets from other settings: backbone.extra may not hold them
CLIENT_ARGUMENTS = {"model": "backbone.model", "messages": "the agent's conversation",
                    "temperature": "backbone.temperature", "top_p": "backbone.top_p",
                    "max_tokens": "backbone.max_tokens", "seed": "the run's seed", "tools": "the agent's tools",
                    "tool_choice": "backbone.tool_choice", "api_base": "backbone.api_base",
                    "base_url": "backbone.api_base", "api_key": "an environment variable named by backbone.api_key_env",
                    "timeout": "llm.retry.timeout", "num_retries": "llm.retry.max_attempts"}

# What the command line may put in backbone.extra: litellm's settings that are not secrets (a price of one's own,
# sampling, limits). Anything else (a header, a request body, a token under any name) could carry a secret, and the
# command line is written to the run's config.yaml and Hydra's logs: those come from a backbone's config file.
EXTRA_SETTINGS = ("input_cost_per_token", "output_cost_per_token", "frequency_penalty", "presence_penalty",
                  "repetition_penalty", "top_k", "min_p", "stop", "logit_bias", "logprobs", "top_logprobs",
                  "max_completion_tokens", "reasoning_effort", "parallel_tool_calls", "response_format",
                  "drop_params", "api_version", "custom_llm_provider")
SECRET_WORDS = {"key", "apikey", "token", "secret", "password", "passwd", "pwd", "pass", "credential", "credentials",
                "auth", "authorization", "bearer"}


def check_not_secret(key: str, override) -> None:
    """Refuse, before Hydra writes anything, a command-line override that could carry a secret (each value of a
    sweep): under ``backbone.extra`` any name but ``EXTRA_SETTINGS`` (the pricing overrides among them), and anywhere
    a key, or a key inside a value, whose last name is a secret's."""
    try:
        values = list(override.sweep_iterator()) if override.is_sweep_override() else [override.value()]
    except Exception:  # noqa: BLE001  (an interval or glob sweep: numbers or config names, nothing to hold a key)
        values = []
    in_extra = key == "backbone.extra" or key.startswith("backbone.extra.")
    for value in values:
        if key == "backbone" and isinstance(value, dict):
            extra = value.get("extra") if isinstance(value.get("extra"), dict) else {}
        elif key == "backbone.extra":
            extra = value if isinstance(value, dict) else {}
        else:
            extra = {key.split(".")[2]: value} if in_extra else {}
        for name in extra:
            if name in CLIENT_ARGUMENTS:
                raise UserError(client_argument(name))
            if name not in EXTRA_SETTINGS:
                raise UserError(f"backbone.extra.{name}: the command line may set only litellm's non-secret settings "
                                f"there ({', '.join(EXTRA_SETTINGS)}), as it is written to the run's config.yaml and "
                                "Hydra's logs; put a key in an environment variable (named by backbone.api_key_env), "
                                "headers and request bodies in a backbone config file")
        named = [key] if not in_extra and value not in (None, "") else []
        secret = next((k for k in named + nested_keys(value) if secret_name(k)), None)
        if secret is not None:
            raise UserError(f"{key}: a secret given on the command line ({secret}) would be written to the run's "
                            "config.yaml and Hydra's logs; put it in an environment variable instead (the API key's "
                            "is named by backbone.api_key_env, e.g. backbone.api_key_env=MY_PROVIDER_KEY)")


def client_argument(name: str) -> str:
    """Why ``backbone.extra`` may not hold ``name`` (one of ``CLIENT_ARGUMENTS``), and what to set instead."""
    return f"backbone.extra.{name} is an argument the client sets itself; give it as {CLIENT_ARGUMENTS[name]}"


def nested_keys(value) -> list[str]:
    """Every key of the mappings inside ``value`` (lists and mappings, at any depth)."""
    if isinstance(value, dict):
        return [str(k) for k in value] + [k for v in value.values() for k in nested_keys(v)]
    if isinstance(value, list):
        return [k for v in value for k in nested_keys(v)]
    return []


def secret_name(key: str) -> bool:
    """Whether a dotted key's last name is a secret's (``api_key``, ``db_password``, ``accessToken``), not one naming
    where a secret is (``api_key_env``) or a setting (``max_tokens``)."""
    name = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", key.rsplit(".", 1)[-1]).lower()
    words = set(re.split(r"[_\-]+", name))
    return bool(words & SECRET_WORDS) and "env" not in words


def resolved(node):
    """A config node as plain data (dicts and lists, interpolations resolved); plain data as it is."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    return OmegaConf.to_container(node, resolve=True) if isinstance(node, (DictConfig, ListConfig)) else node


def make(node, group: str):
    """The object a config node's ``_target_`` names, built from its other keys; a key the class does not take (or
    a missing one) is one clear error."""
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate


    if "_target_" not in node:
        raise UserError(f"{group} {node.get('name')!r} names no class (_target_); see conf/{group}/")
    try:
        return instantiate(node, _convert_="all")
    except InstantiationException as e:
        why = " ".join(str(e.__cause__ or e).split())
        raise UserError(f"{group} {node.get('name')!r}: {why}") from None
