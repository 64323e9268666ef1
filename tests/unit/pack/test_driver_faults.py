"""The pack driver's fault decisions: which reader errors are bad data and which are the device failing,
and that the worker pool starts once when no tokenizer self-check can send the pack back to the start."""

import errno
import json

import pyarrow as pa
import pytest

from shardkit.errors import ReaderError
from shardkit.pack import PackConfig, pack
from shardkit.pack import driver as pack_driver


def _raised(problem: BaseException) -> ReaderError:
    """A ReaderError raised while handling `problem`, the way the readers raise them."""
    try:
        try:
            raise problem
        except BaseException as e:
            raise ReaderError("in/a.jsonl", f"read failed: {e}") from e
    except ReaderError as err:
        return err


@pytest.mark.parametrize("code", [errno.EIO, errno.ESTALE, errno.ENXIO, errno.ETIMEDOUT])
def test_a_failing_device_is_a_device_error(code):
    err = _raised(OSError(code, "boom"))
    assert err.device_error is not None and err.device_error.errno == code
    # also when a reader re-raises it with a line number (the chain is kept)
    try:
        raise ReaderError(err.path, err.problem, line=7) from err
    except ReaderError as again:
        assert again.device_error is not None


@pytest.mark.parametrize("problem", [FileNotFoundError(errno.ENOENT, "gone"), PermissionError(errno.EACCES, "no"),
                                     IsADirectoryError(errno.EISDIR, "dir"), pa.ArrowInvalid("not parquet"),
                                     UnicodeDecodeError("utf-8", b"\xff", 0, 1, "bad"), OSError("no errno")])
def test_bad_or_missing_files_are_not_device_errors(problem):
    assert _raised(problem).device_error is None
    assert ReaderError("x", "corrupt gzip data").device_error is None


def test_the_worker_pool_starts_once_without_a_self_check(tmp_path, monkeypatch):
    src = tmp_path / "in"
    src.mkdir()
    with open(src / "a.jsonl", "w", encoding="utf-8") as f:
        for i in range(400):
            f.write(json.dumps({"text": f"document {i} " * 50}) + "\n")
    starts = []
    real_map = pack_driver.ordered_map

    def counting_map(*args, **kwargs):
        starts.append(kwargs.get("workers"))
        return real_map(*args, **kwargs)

    monkeypatch.setattr(pack_driver, "ordered_map", counting_map)
    config = PackConfig(inputs=(str(src),), output=str(tmp_path / "out"), workers=2)
    result = pack(config)
    assert result.manifest.num_docs == 400
    assert starts == [2]  # the bytes tokenizer needs no self-check, so nothing can restart the pool
