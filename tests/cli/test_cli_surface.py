"""Every command has help, errors are one line with exit 1, usage errors exit 2."""

import pytest
from click.testing import CliRunner

from cli.main import cli
from shardkit import __version__


def _commands():
    return sorted(cli.commands)


def test_version():
    r = CliRunner().invoke(cli, ["--version"])
    assert r.exit_code == 0 and __version__ in r.output


@pytest.mark.parametrize("name", _commands())
def test_every_command_has_help_and_docs(name):
    r = CliRunner().invoke(cli, [name, "--help"])
    assert r.exit_code == 0
    assert cli.commands[name].help, f"{name} lacks a docstring"
    assert len(r.output.splitlines()) > 3


def test_usage_error_exits_2(tmp_path):
    r = CliRunner().invoke(cli, ["pack", str(tmp_path)])  # no -o
    assert r.exit_code == 2
    r = CliRunner().invoke(cli, ["pack", str(tmp_path), "-o", str(tmp_path / "o"), "--shard-size", "12"])
    assert r.exit_code == 2 and "needs a unit" in r.output


def test_library_error_is_one_line_exit_1(tmp_path):
    r = CliRunner().invoke(cli, ["pack", str(tmp_path / "nothing-here.jsonl"), "-o", str(tmp_path / "o"),
                                 "-t", "bytes"])
    assert r.exit_code == 1
    assert "Traceback" not in r.output
    assert r.output.startswith("Error: ") and len(r.output.strip().splitlines()) == 1


def test_library_never_imports_click():
    import subprocess
    import sys
    code = ("import sys, shardkit, shardkit.pack, shardkit.format, shardkit.adopt, shardkit.demo, shardkit.verify, shardkit.inspect, shardkit.loader, shardkit.stream; "
            "sys.exit(1 if 'click' in sys.modules else 0)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
