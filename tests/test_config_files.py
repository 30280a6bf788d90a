"""Every YAML file under conf/ composes, resolves, and builds: a group option with a ``_target_`` instantiates its
class (``ark.build.make``), which refuses a key it does not have."""
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ark import build
from ark.config import CONF, compose, make
from ark.errors import UserError

BUILT = {group: (lambda cfg, group=group: make(cfg[group], group))
         for group in ("backbone", "dataset", "queries", "retriever")}
def option(path: Path) -> tuple[str, str]:
    """(group, option) of a file under conf/: experiments keep their table folder (``table2/no_q``)."""
    parts = path.relative_to(CONF).with_suffix("").parts
    return ("experiment", "/".join(parts[1:])) if parts[0] == "experiment" else ("/".join(parts[:-1]), parts[-1])


OPTIONS = sorted(option(p) for p in CONF.rglob("*.yaml") if p.parent != CONF and p.parent.name != "accelerate")


def overrides(group: str, name: str) -> list[str]:
    if group == "experiment":
        return [f"+experiment={name}"]
    if group == "queries" and name in ("generated", "stark"):  # questions of a STaRK-shaped dataset
        return [f"dataset={'synthetic_mag' if name == 'generated' else 'stark_prime'}", f"queries={name}"]
    return [f"{group}={name}"]


def test_every_group_of_conf_is_listed():
    assert {g for g, _ in OPTIONS} == {"ablation", "agent", "backbone", "collect", "dataset", "distill",
                                       "experiment", "hydra/launcher", "logger", "paths", "prompt", "queries",
                                       "retriever"}
    assert ("experiment", "embedded") in OPTIONS and ("backbone", "gpt-5.2") in OPTIONS


FIRST = {next(o for o in OPTIONS if o[0] == g) for g, _ in OPTIONS}  # the fast loop composes one file per group


@pytest.mark.parametrize("group, name", [pytest.param(g, n, marks=[] if (g, n) in FIRST else [pytest.mark.e2e])
                                         for g, n in OPTIONS], ids=[f"{g}/{n}" for g, n in OPTIONS])
def test_every_config_file_composes_and_builds(group, name):
    cfg = compose(overrides(group, name), hydra_config=group.startswith("hydra/"))
    if group.startswith("hydra/"):
        assert cfg.hydra.launcher._target_.startswith("hydra_plugins.hydra_submitit_launcher")
        return
    OmegaConf.to_container(cfg, resolve=True)  # every interpolation resolves
    for key, built in BUILT.items():
        assert built(cfg) is not None, key
    adapter = OmegaConf.select(cfg, "backbone.local.adapter")
    spec = build.spec(cfg)
    api_base = spec.backbone.resolved_api_base() if hasattr(spec.backbone, "resolved_api_base") else None
    if adapter and not Path(adapter).is_dir():  # a student whose adapter this checkout has not trained or pulled
        with pytest.raises(UserError, match="no adapter directory"):
            build.check_files(spec)
    elif api_base and not listening(api_base):  # a server of one's own (vLLM, ark serve) that is not running here
        with pytest.raises(UserError, match="nothing answers at"):
            build.check_files(spec)
    else:
        build.check_files(spec)


def listening(url: str) -> bool:
    """False where the connection is refused (nothing listens); a host that does not answer at all is not refused."""
    import socket
    from urllib.parse import urlsplit

    u = urlsplit(url)
    try:
        socket.create_connection((u.hostname, u.port or (443 if u.scheme == "https" else 80)), timeout=5).close()
    except ConnectionRefusedError:
        return False
    except OSError:
        pass
    return True


def test_the_accelerate_config_is_one_accelerate_reads():
    from accelerate.commands.config.config_args import ClusterConfig

    path = Path(CONF) / "accelerate" / "multi_gpu.yaml"
    assert ClusterConfig.from_yaml_file(path).distributed_type.value == "MULTI_GPU"


@pytest.mark.parametrize("group, override", [("backbone", "+backbone.temprature=0.2"),
                                             ("backbone", "+backbone.local.adaptor=x"),
                                             ("dataset", "+dataset.graph_directory=x"),
                                             ("queries", "+queries.n_querys=5"),
                                             ("retriever", "+retriever.k1=1.5")])
def test_an_unknown_key_is_one_clear_error(group, override):
    cfg = compose([override])
    with pytest.raises(UserError, match=override.split(".")[-1].split("=")[0]):
        BUILT[group](cfg)


def test_a_config_without_a_class_says_so():
    cfg = compose(["~backbone._target_"])
    with pytest.raises(UserError, match="names no class"):
        BUILT["backbone"](cfg)


def test_a_new_table_row_is_one_yaml_file(tmp_path, monkeypatch):
    """The docs' example (docs/agent.md): a Table 2 row written as one file composes, and the report lists it."""
    import re
    import shutil

    import ark.config
    from ark.report.runs import experiment_spec, row_settings, table_rows
    from ark.runs.identity import identity

    docs = (Path(CONF).parent / "docs" / "agent.md").read_text(encoding="utf-8")
    example = re.search(r"\(`conf/experiment/(table2/\w+)\.yaml`\):\n\n  ```yaml\n(.*?)\n  ```", docs, re.S)
    name, text = example.group(1), "\n".join(line[2:] for line in example.group(2).splitlines())
    conf = tmp_path / "conf"
    shutil.copytree(CONF, conf)
    (conf / "experiment" / f"{name}.yaml").write_text(text + "\n", encoding="utf-8")
    monkeypatch.setattr(ark.config, "CONF", conf)
    cached = (experiment_spec, row_settings, table_rows)  # each remembers what it read of conf/
    for f in cached:
        f.cache_clear()
    try:
        assert table_rows("table2")[-1] == name and row_settings(name)["label"] == "neighborhood without q and F"
        ident = identity(experiment_spec(name, "biokg", "synthetic", ()), "evaluate")
        assert ident["ablation"] == {"name": "no_q_no_f", "neighbors": True, "query_param": False,
                                     "type_filters": False}
        assert ident["split"] == "test-0.1" and ident["backbone"]["name"] == "rules_sampled"
    finally:
        for f in cached:
            f.cache_clear()


def test_a_new_hosted_backbone_is_one_yaml_file(tmp_path, monkeypatch):
    """The docs' example (docs/agent.md): a hosted backbone written as one file composes and builds its class."""
    import re
    import shutil

    import ark.config
    from ark.agent.backbones import HostedBackbone

    docs = (Path(CONF).parent / "docs" / "agent.md").read_text(encoding="utf-8")
    example = re.search(r"`conf/backbone/<name>\.yaml`:\n\n  ```yaml\n(.*?)\n  ```", docs, re.S).group(1)
    text = "\n".join(line[2:] for line in example.splitlines())
    name = re.search(r"^name: (\S+)", text, re.M).group(1)
    conf = tmp_path / "conf"
    shutil.copytree(CONF, conf)
    (conf / "backbone" / f"{name}.yaml").write_text(text + "\n", encoding="utf-8")
    monkeypatch.setattr(ark.config, "CONF", conf)
    cfg = compose([f"backbone={name}"])
    spec = BUILT["backbone"](cfg)
    assert isinstance(spec, HostedBackbone) and spec.model.startswith("mistral/") and not spec.text_protocol
    build.spec(cfg)
