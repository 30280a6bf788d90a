"""STaRK from its public source: the download asked for (dataset.online=true) against a local fake of the Hugging Face
file endpoint (HF_ENDPOINT), the mirror (ARK_MIRROR), and the one-line messages when a file is missing or is not the
pinned version."""
import functools
import hashlib
import os
import subprocess
import sys
import threading
import zipfile
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from ark.data.stark import Stark, load_stark_splits
from ark.errors import UserError
from tests.conftest import compose_cfg
from tests.test_stark import write_prime

ROOT = Path(__file__).resolve().parents[1]
REVISION = "0123456789abcdef0123456789abcdef01234567"  # a made-up commit of the fake Hub
QA = {
    "stark_qa/stark_qa.csv": b'id,query,answer_ids\n0,first question,[1]\n1,second question,"[2, 3]"\n2,third,[4]\n',
    "split/train.index": b"0",
    "split/val.index": b"1",
    "split/test.index": b"2",
}
PINS = {path: hashlib.sha256(data).hexdigest() for path, data in QA.items()}
MIRROR_PATH = "stark/copy/primekg"


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """A fake Hugging Face file endpoint on loopback (``<endpoint>/datasets/<repo>/resolve/<revision>/<path>``)
    serving STaRK-PRIME's question files and a ``processed.zip`` of a tiny PRIME; yields its endpoint URL."""
    root = tmp_path / "hub"
    files = root / "datasets" / "snap-stanford" / "stark" / "resolve" / REVISION
    for path, data in QA.items():
        (files / "qa" / "prime" / path).parent.mkdir(parents=True, exist_ok=True)
        (files / "qa" / "prime" / path).write_bytes(data)
    write_prime(tmp_path / "skb")
    (files / "skb" / "prime").mkdir(parents=True)
    with zipfile.ZipFile(files / "skb" / "prime" / "processed.zip", "w") as archive:
        for f in sorted((tmp_path / "skb" / "prime" / "processed").iterdir()):
            archive.write(f, f"processed/{f.name}")  # STaRK's zip: members start with processed/
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(root)))
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    endpoint = f"http://127.0.0.1:{server.server_port}"
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    yield endpoint
    server.shutdown()
    server.server_close()


def stark_prime(tmp_path, **settings) -> Stark:
    """STaRK-PRIME as conf/dataset/stark_prime.yaml configures it, with the fake Hub's revision and pins."""
    values = dict(name="stark_prime", skb="prime", raw_dir=str(tmp_path / "raw"),
                  documents={"relations": False}, revision=REVISION, qa_files=dict(PINS), qa_mirror_path=MIRROR_PATH)
    return Stark(**{**values, **settings})


def write_mirror(root: Path, files: dict) -> Path:
    for path, data in files.items():
        (root / MIRROR_PATH / path).parent.mkdir(parents=True, exist_ok=True)
        (root / MIRROR_PATH / path).write_bytes(data)
    return root


def test_the_download_asked_for_is_not_blocked_by_the_offline_default(hub, tmp_path):
    import ark  # noqa: F401  (sets the offline default)
    from huggingface_hub import constants

    assert os.environ["HF_HUB_OFFLINE"] == "1" and constants.is_offline_mode()  # the default is in place
    dataset = stark_prime(tmp_path, online=True)
    fetched = dataset.download()
    raw = tmp_path / "raw" / "prime"
    assert fetched["qa/prime/stark_qa/stark_qa.csv"] == str(raw / "stark_qa" / "stark_qa.csv")
    assert all((raw / path).read_bytes() == data for path, data in QA.items())
    assert [len(v) for v in load_stark_splits(raw).values()] == [1, 1, 1]
    assert dataset.build_graph().num_nodes == 4  # processed.zip, unzipped beside the question files
    assert not list(raw.glob(".fetch-*"))  # no temporary file left behind


def test_a_download_that_is_not_its_pinned_sha256_is_refused(hub, tmp_path):
    pins = {**PINS, "split/test.index": "0" * 64}
    with pytest.raises(UserError) as error:
        stark_prime(tmp_path, online=True, qa_files=pins).fetch_questions()
    message = str(error.value)
    assert "\n" not in message and f"{hub}/datasets/snap-stanford/stark/resolve/{REVISION}/qa/prime/split/test.index" \
        in message and f"is not the pinned {'0' * 64}" in message
    assert not (tmp_path / "raw" / "prime" / "split" / "test.index").exists()  # nothing half-fetched is kept


def test_an_unpinned_file_is_downloaded_and_a_file_in_place_is_kept(hub, tmp_path):
    fetched = stark_prime(tmp_path, online=True, qa_files={"split/val.index": None}).fetch_questions()
    assert Path(fetched["qa/prime/split/val.index"]).read_bytes() == b"1"
    (tmp_path / "raw" / "prime" / "stark_qa").mkdir(parents=True)
    for path, data in QA.items():
        (tmp_path / "raw" / "prime" / path).write_bytes(data)
    # every file in place with its pinned sha256: nothing is fetched (this revision is not on the fake Hub)
    stark_prime(tmp_path, online=True, revision="not-on-the-hub").fetch_questions()


def test_the_mirror_is_read_instead_of_the_network(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    mirror = write_mirror(tmp_path / "mirror", QA)
    stark_prime(tmp_path, online=True).fetch_questions(mirror=str(mirror))
    assert all((tmp_path / "raw" / "prime" / path).read_bytes() == data for path, data in QA.items())


def test_a_mirror_file_that_is_not_its_pin_is_refused_in_one_line(tmp_path):
    mirror = write_mirror(tmp_path / "mirror", {**QA, "stark_qa/stark_qa.csv": b"id,query,answer_ids\n9,x,[9]\n"})
    with pytest.raises(UserError, match=r"the mirror holds another version of this file: unset ARK_MIRROR") as error:
        stark_prime(tmp_path).fetch_questions(mirror=str(mirror))
    assert str(error.value).startswith(str(mirror / MIRROR_PATH / "stark_qa" / "stark_qa.csv"))
    assert "\n" not in str(error.value) and not (tmp_path / "raw" / "prime" / "stark_qa" / "stark_qa.csv").exists()


def test_an_unpinned_file_is_never_taken_from_the_mirror(tmp_path):
    mirror = write_mirror(tmp_path / "mirror", QA)
    with pytest.raises(UserError, match=r"no sha256 is pinned .* unset ARK_MIRROR and set dataset\.online=true"):
        stark_prime(tmp_path, qa_files={"split/val.index": None}).fetch_questions(mirror=str(mirror))


def test_a_file_missing_from_the_mirror_is_named(tmp_path):
    mirror = write_mirror(tmp_path / "mirror", {"stark_qa/stark_qa.csv": QA["stark_qa/stark_qa.csv"]})
    with pytest.raises(UserError, match=r"the mirror has no .*primekg/split/train\.index \(mirror="):
        stark_prime(tmp_path).fetch_questions(mirror=str(mirror))


def test_without_network_a_failed_download_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    with pytest.raises(UserError, match=r"^could not download http://127\.0\.0\.1:9/datasets/snap-stanford/stark/"
                                        r"resolve/\w+/qa/prime/stark_qa/stark_qa\.csv .*set ARK_MIRROR") as error:
        stark_prime(tmp_path, online=True).download()
    assert f"<mirror>/{MIRROR_PATH}/stark_qa/stark_qa.csv" in str(error.value)


# ---------------------------------------------------------------- the real configuration


def real_config(tmp_path, *overrides):
    return compose_cfg([f"paths.data={tmp_path}", "mirror=null", "logger=none", "dataset=stark_prime",
                        "queries=stark", *overrides])


def test_a_missing_question_file_names_the_file_its_url_and_the_settings(tmp_path):
    from ark.stages import download, make_queries

    cfg = real_config(tmp_path)
    url = ("https://huggingface.co/datasets/snap-stanford/stark/resolve/88269e23e90587f99476c5dd74e235a0877e69be/"
           "qa/prime/stark_qa/stark_qa.csv")
    with pytest.raises(UserError) as error:
        download.run(cfg)
    message = str(error.value)
    assert message.startswith(f"{tmp_path}/raw/stark/prime/stark_qa/stark_qa.csv is missing; set dataset.online=true "
                              f"to download it from {url}, or ARK_MIRROR to a directory holding a copy under <mirror>/"
                              "stark/git_history_f899c43parent/data/primekg/stark_qa/stark_qa.csv")
    with pytest.raises(UserError) as error:
        make_queries.run(cfg)
    assert url in str(error.value) and "dataset=stark_prime dataset.online=true" in str(error.value)
    assert "ARK_MIRROR" in str(error.value) and "\n" not in str(error.value)


@pytest.mark.e2e  # a Python subprocess
def test_the_download_stage_says_it_in_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("ARK_MIRROR", "HF_ENDPOINT")}
    out = subprocess.run([sys.executable, "-m", "ark.stages.download", "dataset=stark_prime", f"paths.data={tmp_path}",
                          "logger=none", f"hydra.run.dir={tmp_path}/hydra"], cwd=ROOT, env=env, capture_output=True,
                         text=True)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith(f"error: {tmp_path}/raw/stark/prime/stark_qa/stark_qa.csv "
                                                          "is missing; set dataset.online=true to download it from "
                                                          "https://huggingface.co/datasets/snap-stanford/stark/")


def test_no_default_path_names_the_teams_shared_directory():
    for path in [*(ROOT / "conf").rglob("*.yaml"), ROOT / "params.yaml", *(ROOT / "stark").glob("*.yaml")]:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            setting = line.split("#", 1)[0]
            assert "shared" not in setting, f"{path.relative_to(ROOT)}:{n}: {line}"


def test_the_pinned_split_files_of_prime_are_the_git_history_copys(shared_dir):
    """What the comment in conf/dataset/stark_prime.yaml says: PRIME's three split files in the team's copy are the
    pinned ones; its stark_qa.csv is another version (refused as a mirror of the pinned file)."""
    from ark.io import sha256_file

    cfg = real_config(shared_dir)
    copy = shared_dir / cfg.dataset.qa_mirror_path
    for path in ("split/train.index", "split/val.index", "split/test.index"):
        assert sha256_file(copy / path) == cfg.dataset.qa_files[path]
    assert sha256_file(copy / "stark_qa" / "stark_qa.csv") != cfg.dataset.qa_files["stark_qa/stark_qa.csv"]
