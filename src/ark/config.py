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
        if not o.is_delete() and secret_name(group) and o.get_value_element_as_str() not in ("null", ""):
            raise UserError(f"{group}: a secret given on the command line would be written to the run's config.yaml "
                            "and Hydra's logs; put it in an environment variable instead (the API key's is named by "
                            "backbone.api_key_env, e.g. backbone.api_key_env=MY_PROVIDER_KEY)")
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


SECRET_WORDS = {"key", "apikey", "token", "secret", "password", "passwd", "pass", "credential", "credentials",
                "auth", "bearer"}


def secret_name(key: str) -> bool:
    """Whether a dotted key's last name is a secret's (``api_key``, ``db_password``, ``access_token``), not one naming
    where a secret is (``api_key_env``) or a setting (``max_tokens``)."""
    words = set(re.split(r"[_\-]+", key.rsplit(".", 1)[-1].lower()))
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
