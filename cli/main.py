"""The `shardkit` group: global flags and the one place library errors become exit codes.

Exit codes: 0 ok, 1 a problem (a ShardkitError, or problems found), 2 usage error (click's own).
"""

from __future__ import annotations

import logging
import sys
import traceback

import click

from shardkit import ShardkitError, __version__

from .adopt_cmd import adopt_cmd
from .decompress_cmd import decompress_cmd
from .demo_cmd import demo_cmd
from .explain_cmd import explain_cmd
from .inspect_cmd import inspect_cmd, show_cmd
from .merge_cmd import merge_cmd
from .pack_cmd import pack_cmd
from .plan_cmd import plan_cmd
from .stream_cmd import stream_cmd
from .verify_cmd import verify_cmd


class ShardkitGroup(click.Group):
    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except ShardkitError as e:
            if ctx.obj and ctx.obj.get("debug"):
                traceback.print_exc()
            raise click.ClickException(str(e)) from None
        except KeyboardInterrupt:
            click.echo("\ninterrupted; an unfinished pack resumes when the same command is run again", err=True)
            sys.exit(130)


@click.group(cls=ShardkitGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="shardkit")
@click.option("--debug", is_flag=True, help="Show full tracebacks for errors.")
@click.option("-v", "--verbose", count=True, help="More log messages on stderr: -v info, -vv debug.")
@click.option("-q", "--quiet", is_flag=True, help="Log errors only (no warnings such as storage retries).")
@click.pass_context
def cli(ctx: click.Context, debug: bool, verbose: int, quiet: bool) -> None:
    """Pack text corpora into indexed token shards and stream deterministic, resumable batches.

    Shell completion (bash, zsh, fish): eval "$(_SHARDKIT_COMPLETE=bash_source shardkit)" in ~/.bashrc;
    docs/quickstart.md has the others.
    """
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug
    configure_logging(logging.ERROR if quiet else logging.DEBUG if verbose >= 2 else
                      logging.INFO if verbose == 1 else logging.WARNING)


class _StderrHandler(logging.Handler):
    """Writes each record to the sys.stderr of the moment (click's test runner swaps it)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
        except Exception:  # noqa: BLE001 - logging's own convention: report, never raise
            self.handleError(record)


def configure_logging(level: int) -> None:
    """The "shardkit" loggers' messages to stderr as `shardkit: LEVEL: message`, at `level` (idempotent)."""
    root = logging.getLogger("shardkit")
    root.setLevel(level)
    if not any(isinstance(h, _StderrHandler) for h in root.handlers):
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("shardkit: %(levelname)s: %(message)s"))
        root.addHandler(handler)


cli.add_command(pack_cmd)
cli.add_command(adopt_cmd)
cli.add_command(demo_cmd)
cli.add_command(stream_cmd)
cli.add_command(explain_cmd)
cli.add_command(verify_cmd)
cli.add_command(inspect_cmd)
cli.add_command(show_cmd)
cli.add_command(merge_cmd)
cli.add_command(decompress_cmd)
cli.add_command(plan_cmd)


def main() -> None:
    cli(prog_name="shardkit")


if __name__ == "__main__":
    main()
