"""Library messages go through `logging` (a trainer's setup controls them); the CLI's -v / -q set the level;
shell completion works as docs/quickstart.md says."""

import logging
import os
import subprocess

from support.cli import shardkit_cmd

from shardkit.pack import PackConfig, TokenizeOptions, pack


def _pack(tmp_path, *flags, out="o"):
    (tmp_path / "a.jsonl").write_text('{"text": "hello"}\n{"text": "world"}\n')
    return subprocess.run(shardkit_cmd() + [*flags, "pack", str(tmp_path / "a.jsonl"), "-o", str(tmp_path / out),
                                            "-t", "bytes", "-q", "-w", "1"], capture_output=True, text=True,
                          timeout=120)


def test_cli_verbosity_flags(tmp_path):
    quiet = _pack(tmp_path, out="a")
    assert quiet.returncode == 0 and "shardkit: INFO" not in quiet.stderr
    info = _pack(tmp_path, "-v", out="b")
    assert "shardkit: INFO: packing 1 input file(s)" in info.stderr and "DEBUG" not in info.stderr
    debug = _pack(tmp_path, "-vv", out="c")
    assert "shardkit: DEBUG: shard shard-00000: 2 docs" in debug.stderr
    assert "packed 1 file(s)" in debug.stdout  # the summary stays on stdout


def test_library_logs_through_the_callers_logging(tmp_path, caplog):
    (tmp_path / "a.jsonl").write_text('{"text": "hello"}\n')
    with caplog.at_level(logging.INFO, logger="shardkit"):
        pack(PackConfig(inputs=(str(tmp_path / "a.jsonl"),), output=str(tmp_path / "o"), workers=1,
                        tokenize=TokenizeOptions(tokenizer="bytes")))
    assert any(r.name == "shardkit.pack" and "packing 1 input file(s)" in r.getMessage() for r in caplog.records)


def test_shell_completion_as_documented():
    env = {**os.environ, "_SHARDKIT_COMPLETE": "bash_source"}
    script = subprocess.run(shardkit_cmd(), env=env, capture_output=True, text=True, timeout=60)
    assert script.returncode == 0 and "_shardkit_completion" in script.stdout
    env = {**os.environ, "_SHARDKIT_COMPLETE": "bash_complete", "COMP_WORDS": "shardkit ve", "COMP_CWORD": "1"}
    words = subprocess.run(shardkit_cmd(), env=env, capture_output=True, text=True, timeout=60)
    assert "plain,verify" in words.stdout
