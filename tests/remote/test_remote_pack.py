"""`pack` from S3 inputs and to S3 (and memory://) outputs, against a real S3 endpoint (moto server).

The contract: a remote input packs to the same bytes as the same local input; a remote output holds
exactly the bytes of a local pack (manifest included, fingerprint equal), appears only when complete
(manifest.json last), and survives SIGKILL during the upload (re-running finishes it, re-sending only
what is missing). Faults come from the FaultyProxy in front of the server.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import signal
import subprocess
import uuid
from pathlib import Path

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from support.cli import shardkit_cmd
from support.faulty_proxy import Action, Rule

from shardkit.errors import InputError, PackError, RemoteError, ShardkitError
from shardkit.pack import PackConfig, pack
from shardkit.remote import RetryPolicy
from shardkit.writer import ShardLimits

FAST_RETRY = RetryPolicy(max_attempts=6, initial_delay=0.01, max_delay=0.05, deadline=30)
NO_CLIENT_RETRIES = {"config_kwargs": {"retries": {"total_max_attempts": 1}}}  # shardkit's retries only
LIMITS = ShardLimits(max_bytes=48 << 10, checksum_block_size=4096)  # ~5 shards


def _write_corpus(d: Path) -> list[str]:
    """jsonl.zst, jsonl.gz, parquet and plain jsonl inputs (~120 KB of text, a few shards)."""
    rng = random.Random(7)
    texts = [f"doc {i}: " + " ".join(rng.choice(["héllo", "wörld", "shard", "token", "✓"])
                                     for _ in range(rng.randint(3, 60))) for i in range(640)]
    d.mkdir(parents=True)

    def jsonl(ts: list[str]) -> bytes:
        return "".join(json.dumps({"text": t}) + "\n" for t in ts).encode()

    (d / "a.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(jsonl(texts[:160])))
    (d / "b.jsonl.gz").write_bytes(gzip.compress(jsonl(texts[160:320])))
    pq.write_table(pa.table({"text": texts[320:480]}), d / "c.parquet", row_group_size=32)
    (d / "d.jsonl").write_bytes(jsonl(texts[480:]))
    (d / "notes.md").write_text("not an input")  # ignored by globs and directory walks alike
    return texts


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("remote-corpus") / "corpus"
    _write_corpus(d)
    return d


@pytest.fixture(scope="module")
def local_ref(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The corpus packed locally: the bytes every remote variant must reproduce."""
    out = tmp_path_factory.mktemp("remote-ref") / "ref"
    pack(PackConfig(inputs=(str(corpus),), output=str(out), workers=1, limits=LIMITS))
    return out


def _upload_corpus(endpoint, corpus: Path, prefix: str = "corpus") -> str:
    client = endpoint.server.client()
    for p in sorted(corpus.iterdir()):
        client.put_object(Bucket=endpoint.bucket, Key=f"{prefix}/{p.name}", Body=p.read_bytes())
    return endpoint.url(prefix)


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in directory.iterdir() if p.is_file() and not p.name.startswith(".")}


def _without_volatile(manifest: bytes, *, inputs: bool = False) -> dict:
    doc = json.loads(manifest)
    doc.pop("created")
    if inputs:  # where the inputs were read from is recorded; everything derived from their bytes is equal
        doc.pop("fingerprint")
        doc["pack"].pop("inputs")
        doc["stats"].pop("sources")
    return doc


def _config(inputs, output, **kw) -> PackConfig:
    kw.setdefault("workers", 1)
    kw.setdefault("limits", LIMITS)
    kw.setdefault("retry", FAST_RETRY)
    return PackConfig(inputs=tuple(inputs), output=str(output), **kw)


def _remote_dataset(endpoint, prefix: str) -> dict[str, bytes]:
    return {k[len(prefix) + 1:]: v for k, v in endpoint.objects(prefix + "/").items()}


# --- remote inputs -------------------------------------------------------------------------------------


def test_pack_from_s3_equals_pack_from_local(s3, corpus, local_ref, tmp_path):
    url = _upload_corpus(s3, corpus)
    out = tmp_path / "from-s3"
    result = pack(_config([url + "/*.jsonl.zst", url + "/*.jsonl.gz", url + "/*.parquet", url + "/*.jsonl"],
                          out, storage_options=s3.storage_options()))
    ref = pack(_config([f"{corpus}/*.jsonl.zst", f"{corpus}/*.jsonl.gz", f"{corpus}/*.parquet",
                        f"{corpus}/*.jsonl"], tmp_path / "local-globs"))
    got, want = _files(out), _files(tmp_path / "local-globs")
    assert sorted(got) == sorted(want)
    assert all(got[n] == want[n] for n in want if n != "manifest.json")
    assert _without_volatile(got["manifest.json"], inputs=True) == _without_volatile(want["manifest.json"], inputs=True)
    assert result.manifest.num_tokens == ref.manifest.num_tokens > 0
    # a directory URL walks like a local directory: same files (same order), same bytes as the local pack
    walked = pack(_config([url + "/"], tmp_path / "walked", storage_options=s3.storage_options()))
    assert walked.input_files == 4
    assert all(_files(tmp_path / "walked")[n] == v for n, v in _files(local_ref).items() if n != "manifest.json")


def test_remote_input_errors_name_the_url(s3, tmp_path):
    with pytest.raises(InputError, match=r"s3://.*/nothing-here"):
        pack(_config([s3.url("nothing-here/*.jsonl")], tmp_path / "o", storage_options=s3.storage_options()))


def test_transient_read_faults_on_inputs_are_retried_to_identical_bytes(faulty_s3, corpus, local_ref, tmp_path,
                                                                        caplog):
    url = _upload_corpus(faulty_s3, corpus)
    proxy = faulty_s3.proxy
    # more consecutive faults on one object than s3fs retries by itself: shardkit's re-read must take over
    truncate = proxy.add(Rule(Action.TRUNCATE, method="GET", path=r"/corpus/b\.jsonl\.gz", times=7))
    errors = proxy.add(Rule(Action.ERROR, method="GET", path=r"/corpus/d\.jsonl", status=503, times=2))
    out = tmp_path / "out"
    pack(_config([url + "/"], out, storage_options=faulty_s3.storage_options(**NO_CLIENT_RETRIES)))
    assert truncate.applied == 7 and errors.applied == 2
    assert any("continuing from the last good position" in r.getMessage() for r in caplog.records)
    assert all(_files(out)[n] == v for n, v in _files(local_ref).items() if n != "manifest.json")


def test_forbidden_input_is_a_clear_error(faulty_s3, corpus, tmp_path):
    url = _upload_corpus(faulty_s3, corpus)
    faulty_s3.proxy.add(Rule(Action.ERROR, method="GET", status=403, times=None))
    with pytest.raises(ShardkitError, match=r"s3://") as e:
        pack(_config([url + "/"], tmp_path / "o", storage_options=faulty_s3.storage_options(**NO_CLIENT_RETRIES)))
    assert "denied" in str(e.value).lower() or "forbidden" in str(e.value).lower()


# --- remote outputs ------------------------------------------------------------------------------------


def test_pack_to_s3_holds_exactly_the_local_pack(s3, corpus, local_ref, tmp_path):
    result = pack(_config([str(corpus)], s3.url("ds/"), storage_options=s3.storage_options(),
                          staging_dir=str(tmp_path / "staging")))
    remote, local = _remote_dataset(s3, "ds"), _files(local_ref)
    assert sorted(remote) == sorted(local)
    assert all(remote[n] == local[n] for n in local if n != "manifest.json")
    assert _without_volatile(remote["manifest.json"]) == _without_volatile(local["manifest.json"])
    assert result.fingerprint == json.loads(local["manifest.json"])["fingerprint"]
    assert result.remote_url == s3.url("ds") and result.upload is not None
    assert len(result.upload.uploaded) == len(local) - 1 and not result.upload.kept
    assert not any((tmp_path / "staging").iterdir())  # staging removed after a complete upload


def test_finished_remote_dataset_is_refused_then_overwritten(s3, corpus, tmp_path):
    url = s3.url("ds")
    opts = {"storage_options": s3.storage_options(), "staging_dir": str(tmp_path / "st")}
    first = pack(_config([str(corpus)], url, **opts))
    with pytest.raises(PackError, match="already holds a finished dataset.*--overwrite"):
        pack(_config([str(corpus)], url, **opts))
    # a different job (smaller shards: more of them) replaces it; stale objects of the old one are removed
    second = pack(_config([str(corpus)], url, overwrite=True,
                          limits=ShardLimits(max_bytes=24 << 10, checksum_block_size=4096), **opts))
    remote = _remote_dataset(s3, "ds")
    assert len(second.manifest.shards) > len(first.manifest.shards)
    names = {n for s in second.manifest.shards for n in (s.bin_name, s.idx_name, s.sum_name)}
    assert set(remote) == names | {"manifest.json"}
    assert json.loads(remote["manifest.json"])["fingerprint"] == second.fingerprint


def test_foreign_objects_at_the_output_are_refused(s3, corpus, tmp_path):
    s3.server.client().put_object(Bucket=s3.bucket, Key="ds/README.txt", Body=b"mine")
    with pytest.raises(PackError, match="not a shardkit output"):
        pack(_config([str(corpus)], s3.url("ds"), storage_options=s3.storage_options(),
                     staging_dir=str(tmp_path / "st")))


def test_pack_to_memory_url(corpus, local_ref, tmp_path):
    url = f"memory://shardkit-test-{uuid.uuid4().hex[:8]}/ds"
    pack(_config([str(corpus)], url, staging_dir=str(tmp_path / "st")))
    fs = fsspec.filesystem("memory")
    root = url.split("://", 1)[1]
    local = _files(local_ref)
    remote = {p.rsplit("/", 1)[-1]: fs.cat_file(p) for p in fs.ls(root, detail=False)}
    assert sorted(remote) == sorted(local)
    assert all(remote[n] == local[n] for n in local if n != "manifest.json")
    fs.rm(root, recursive=True)


def test_manifest_is_uploaded_after_every_other_file(faulty_s3, corpus, tmp_path):
    proxy = faulty_s3.proxy
    # slow shard uploads widen the window in which an early manifest would be visible
    proxy.add(Rule(Action.DELAY, method="PUT", path=r"\.bin$", delay=0.05, times=None))
    pack(_config([str(corpus)], faulty_s3.url("ds"), storage_options=faulty_s3.storage_options(),
                 staging_dir=str(tmp_path / "st"), upload_parallel=4))
    puts = [s for s in proxy.seen() if s.method == "PUT" and s.status == 200]
    manifest = [s for s in puts if s.path.endswith("/manifest.json")]
    others = [s for s in puts if not s.path.endswith("/manifest.json")]
    assert len(manifest) == 1 and others
    assert max(s.finished for s in others) <= manifest[0].started


def test_transient_upload_faults_are_retried(faulty_s3, corpus, local_ref, tmp_path):
    proxy = faulty_s3.proxy
    rules = [
        proxy.add(Rule(Action.ERROR, method="PUT", path=r"\.bin$", status=503, times=2)),
        proxy.add(Rule(Action.ERROR, method="PUT", path=r"\.idx$", status=500, times=1)),
        proxy.add(Rule(Action.DROP_RESPONSE, method="PUT", path=r"\.sum\.json$", times=1)),  # stored, unacknowledged
        proxy.add(Rule(Action.DROP, method="PUT", path=r"manifest\.json$", times=1)),
        proxy.add(Rule(Action.TRUNCATE, method="GET", path=r"\.bin$", times=1)),  # the read-back verification
    ]
    pack(_config([str(corpus)], faulty_s3.url("ds"),
                 storage_options=faulty_s3.storage_options(**NO_CLIENT_RETRIES), staging_dir=str(tmp_path / "st")))
    assert all(r.applied == r.times for r in rules)
    remote, local = _remote_dataset(faulty_s3, "ds"), _files(local_ref)
    assert sorted(remote) == sorted(local)
    assert all(remote[n] == local[n] for n in local if n != "manifest.json")


def test_forbidden_upload_is_a_clear_error(faulty_s3, corpus, tmp_path):
    faulty_s3.proxy.add(Rule(Action.ERROR, method="PUT", status=403, times=None))
    with pytest.raises(RemoteError, match=r"upload s3://.*/ds/.*access denied") as e:
        pack(_config([str(corpus)], faulty_s3.url("ds"), storage_options=faulty_s3.storage_options(),
                     staging_dir=str(tmp_path / "st")))
    assert not e.value.transient and e.value.attempts == 1
    assert "manifest.json" not in _remote_dataset(faulty_s3, "ds")


def test_exhausted_retries_say_so_and_a_rerun_finishes(faulty_s3, corpus, local_ref, tmp_path):
    proxy = faulty_s3.proxy
    rule = proxy.add(Rule(Action.ERROR, method="PUT", path=r"\.idx$", status=500, times=None))
    opts = {"storage_options": faulty_s3.storage_options(**NO_CLIENT_RETRIES), "staging_dir": str(tmp_path / "st"),
            "retry": RetryPolicy(max_attempts=2, initial_delay=0.01, max_delay=0.01)}
    with pytest.raises(RemoteError, match=r"still failing after 2 attempt\(s\).*re-run") as e:
        pack(_config([str(corpus)], faulty_s3.url("ds"), **opts))
    assert e.value.transient
    assert "manifest.json" not in _remote_dataset(faulty_s3, "ds")
    proxy.remove(rule)
    result = pack(_config([str(corpus)], faulty_s3.url("ds"), **opts))
    assert result.upload is not None and result.upload.kept  # the shards verified by the first run stay
    remote = _remote_dataset(faulty_s3, "ds")
    assert all(remote[n] == v for n, v in _files(local_ref).items() if n != "manifest.json")


# --- the CLI, in real subprocesses ---------------------------------------------------------------------


def _cli(corpus: Path, url: str, endpoint: str, staging: Path, *extra: str) -> list[str]:
    return shardkit_cmd() + ["pack", str(corpus), "-o", url, "--shard-size", "48KiB", "--checksum-block-size",
                             "4KiB", "--workers", "1", "--quiet", "-t", "bytes", "--staging-dir", str(staging),
                             "--storage-option", f"client_kwargs.endpoint_url={endpoint}", *extra]


def test_sigkill_during_upload_then_rerun_is_byte_identical(faulty_s3, corpus, local_ref, tmp_path):
    proxy = faulty_s3.proxy
    # the third shard upload hangs: the process is killed with some shards uploaded and no manifest
    hang = proxy.add(Rule(Action.DELAY, method="PUT", path=r"\.bin$", after=2, delay=30, times=1))
    cmd = _cli(corpus, faulty_s3.url("ds"), proxy.endpoint_url, tmp_path / "st", "--json")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert proxy.wait_for(lambda p: hang.applied == 1 or proc.poll() is not None, timeout=60)
        assert proc.poll() is None, "the pack ended before its upload hung"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    partial = _remote_dataset(faulty_s3, "ds")
    assert "manifest.json" not in partial and partial  # some files made it, the dataset is not visible
    proxy.clear()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["path"] == faulty_s3.url("ds")
    remote, local = _remote_dataset(faulty_s3, "ds"), _files(local_ref)
    assert sorted(remote) == sorted(local)
    assert all(remote[n] == local[n] for n in local if n != "manifest.json")
    assert json.loads(remote["manifest.json"])["fingerprint"] == json.loads(local["manifest.json"])["fingerprint"]
    # only what was missing went up again; what the killed run had verified was trusted via the ledger
    assert report["upload"]["kept"] >= 1
    assert proxy.count(method="PUT") == report["upload"]["uploaded"] + 1


def test_cli_reads_endpoint_from_fsspec_env_and_refuses_a_finished_output(s3, corpus, tmp_path):
    url = _upload_corpus(s3, corpus)
    env = {**os.environ, "FSSPEC_S3": json.dumps({"client_kwargs": {"endpoint_url": s3.endpoint_url}})}
    base = shardkit_cmd() + ["pack", url + "/", "--shard-size", "48KiB", "--workers", "1", "--quiet", "-t", "bytes",
                             "--staging-dir", str(tmp_path / "st"), "-o"]
    first = subprocess.run(base + [s3.url("out")], capture_output=True, text=True, env=env, timeout=120)
    assert first.returncode == 0, first.stderr
    assert s3.url("out") in first.stdout
    again = subprocess.run(base + [s3.url("out")], capture_output=True, text=True, env=env, timeout=120)
    assert again.returncode == 1
    assert "already holds a finished dataset" in again.stderr and "--overwrite" in again.stderr
