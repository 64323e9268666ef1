"""A real corpus file, when the shared data directory is present (skipped otherwise)."""

from __future__ import annotations

from pathlib import Path

import pytest
from reader_testutil import input_file, read_all

HUMANEVAL = Path("/work/shared/data/corpus/humaneval/HumanEval.jsonl.gz")


@pytest.mark.skipif(not HUMANEVAL.is_file(), reason=f"{HUMANEVAL} is not present")
def test_humaneval_prompts():
    recs = read_all(input_file(HUMANEVAL), text_field="prompt", id_field="task_id")
    assert len(recs) == 164
    assert all(r.error is None and r.text for r in recs)
    assert recs[0].doc_id == "HumanEval/0" and recs[-1].doc_id == "HumanEval/163"
    assert [r.index for r in recs] == list(range(164))
    assert [r.doc_id for r in read_all(input_file(HUMANEVAL), start=160, text_field="prompt",
                                       id_field="task_id")] == [f"HumanEval/{i}" for i in range(160, 164)]
