"""`verify`, `inspect` and `show` take every URL `stream` takes, with the same cache and storage options,
and say what they say about the local copy of the same dataset (against a real S3 server: moto)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from cli.main import cli


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    d = tmp_path_factory.mktemp("vis")
    (d / "in.jsonl").write_text("".join(json.dumps({"text": f"document {i}: " + "words " * (i % 50 + 1)}) + "\n"
                                        for i in range(400)))
    out = d / "ds"
    r = CliRunner().invoke(cli, ["pack", str(d / "in.jsonl"), "-o", str(out), "-t", "bytes", "-q", "-w", "1",
                                 "--shard-size", "8KB", "--checksum-block-size", "4KiB"])
    assert r.exit_code == 0, r.output
    return out


def _upload(s3, local, prefix="ds") -> str:
    client = s3.server.client()
    for f in sorted(local.iterdir()):
        client.put_object(Bucket=s3.bucket, Key=f"{prefix}/{f.name}", Body=f.read_bytes())
    return s3.url(prefix)


def _run(*args):
    return CliRunner().invoke(cli, [*map(str, args)])


def _remote(s3, tmp_path):
    return ["--cache-dir", tmp_path / "cache", "--storage-option", f"client_kwargs.endpoint_url={s3.endpoint_url}"]


def test_verify_inspect_show_on_s3_match_local(s3, local, tmp_path):
    url = _upload(s3, local)
    opts = _remote(s3, tmp_path)
    for mode in ([], ["--quick"], ["--deep"]):
        here, there = _run("verify", local, "--json", *mode), _run("verify", url, "--json", *mode, *opts)
        assert here.exit_code == 0 and there.exit_code == 0, there.output
        a, b = json.loads(here.output), json.loads(there.output)
        assert b["path"] == url and b["verdict"] == a["verdict"] == "ok"
        assert b["bytes_total"] == a["bytes_total"] and b["fingerprint"] == a["fingerprint"]
    here, there = _run("inspect", local, "--json"), _run("inspect", url, "--json", *opts)
    assert there.exit_code == 0, there.output
    a, b = json.loads(here.output), json.loads(there.output)
    assert b.pop("path") == url and a.pop("path") == str(local)
    assert a == b  # disk bytes included: the remote files' sizes
    text = _run("inspect", url, *opts)
    assert text.exit_code == 0 and url in text.output and "histogram" in text.output
    for doc in (0, 399):
        here, there = _run("show", local, doc, "--json"), _run("show", url, doc, "--json", *opts)
        assert there.exit_code == 0, there.output
        assert json.loads(here.output) == json.loads(there.output)
        assert f"document {doc}:" in json.loads(there.output)["text"]
    r = _run("show", url, 400, *opts)
    assert r.exit_code == 1 and "out of range" in r.output
    assert not any((tmp_path / "cache").glob("copy-*"))  # the temporary copies are gone


def test_remote_verify_names_the_url_of_a_damaged_shard(s3, local, tmp_path):
    url = _upload(s3, local, "bad")
    client = s3.server.client()
    raw = bytearray(client.get_object(Bucket=s3.bucket, Key="bad/shard-00001.bin")["Body"].read())
    raw[100] ^= 0xFF
    client.put_object(Bucket=s3.bucket, Key="bad/shard-00001.bin", Body=bytes(raw))
    r = _run("verify", url, *_remote(s3, tmp_path))
    assert r.exit_code == 1, r.output
    assert "CORRUPT" in r.output and "shard-00001" in r.output and "copy-" not in r.output
    r = _run("verify", url, *_remote(s3, tmp_path), "--json")
    report = json.loads(r.output)
    assert report["verdict"] == "corrupt" and report["path"] == url
    assert [p["shard"] for p in report["problems"]] == ["shard-00001"]
    assert "copy-" not in r.output


def test_remote_errors_are_clear(s3, local, tmp_path):
    url = _upload(s3, local, "lim")
    r = _run("verify", url, *_remote(s3, tmp_path), "--cache-limit", "4KiB")
    assert r.exit_code == 1 and "more than the cache limit" in r.output and "--cache-limit" in r.output
    r = _run("inspect", s3.url("nothing-here"), *_remote(s3, tmp_path))
    assert r.exit_code == 1 and "not found: check the URL" in r.output and "Traceback" not in r.output
    r = _run("inspect", local, "--cache-dir", tmp_path)
    assert r.exit_code == 2 and "applies to a remote DATASET URL only" in r.output
    r = _run("show", tmp_path / "missing", 0)
    assert r.exit_code == 2 and "is not a directory" in r.output


def test_dry_run_of_s3_inputs_from_a_config_file(s3, tmp_path):
    client = s3.server.client()
    for k in range(3):
        body = "".join(json.dumps({"content": f"doc {k}-{i} " * 30}) + "\n" for i in range(50))
        client.put_object(Bucket=s3.bucket, Key=f"in/part-{k}.jsonl", Body=body.encode())
    cfg = tmp_path / "pack.yaml"
    cfg.write_text(f"inputs: ['{s3.url('in')}/*.jsonl']\noutput: {tmp_path / 'out'}\ntokenizer: bytes\n"
                   f"text-field: content\nstorage_options:\n  client_kwargs: {{endpoint_url: '{s3.endpoint_url}'}}\n")
    r = _run("pack", "--config", cfg, "--dry-run", "--json")
    assert r.exit_code == 0, r.output
    plan = json.loads(r.output)
    assert [f["url"].rsplit("/", 1)[1] for f in plan["inputs"]] == ["part-0.jsonl", "part-1.jsonl", "part-2.jsonl"]
    assert plan["sample_docs"] == 150 and not (tmp_path / "out").exists()
    r = _run("pack", "--config", cfg, "-q")
    assert r.exit_code == 0, r.output
    assert f"{plan['estimated_docs']} docs" in r.output.replace(",", "")
