"""`pack --dry-run`: what a pack would read and write, estimated from a sample, without writing anything.

The estimate tokenizes the first documents of the input with the real tokenizer. Files read to their end
within the sample give tokens per input byte (compression and JSON overhead included); that rate scales
to the total input size. When no file fits in the sample, the rate is tokens per character of text,
assuming one byte per character (a note says so: compressed inputs then hold more than estimated).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ReaderError
from ..format.dtypes import token_dtype_for_vocab
from ..format.manifest import MANIFEST_NAME
from ..readers import read_records
from ..remote.fs import is_remote, storage_options_scope
from ..sources import input_format, list_inputs
from ..tokenizers import load_tokenizer
from ..units import human_bytes, human_count
from ..writer import JOURNAL_NAME
from .config import PackConfig

__all__ = ["PackPlan", "plan_pack"]

SAMPLE_CHARS = 4 << 20
SAMPLE_DOCS = 2000


@dataclass(frozen=True)
class PackPlan:
    output: str
    output_state: str
    inputs: list[dict[str, Any]]  # per file: url, bytes, format
    input_bytes: int
    tokenizer: str
    dtype: str
    sample_docs: int
    sample_tokens: int
    tokens_per_input_byte: float
    estimated_tokens: int
    estimated_docs: int
    estimated_shards: int
    shard_files: list[str]
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def render(self) -> str:
        by_format: dict[str, list[int]] = {}
        for f in self.inputs:
            agg = by_format.setdefault(f["format"], [0, 0])
            agg[0] += 1
            agg[1] += f["bytes"]
        lines = [f"dry run: nothing is written to {self.output}",
                 f"inputs     {len(self.inputs):,} file(s), {human_bytes(self.input_bytes)} ("
                 + ", ".join(f"{k}: {n:,} file(s), {human_bytes(b)}" for k, (n, b) in sorted(by_format.items())) + ")"]
        lines += [f"  {f['url']}  {human_bytes(f['bytes'])}" for f in self.inputs[:10]]
        if len(self.inputs) > 10:
            lines.append(f"  … and {len(self.inputs) - 10:,} more")
        lines += [
            f"tokenizer  {self.tokenizer} ({self.dtype})",
            f"sample     {self.sample_docs:,} document(s), {self.sample_tokens:,} tokens: "
            f"{self.tokens_per_input_byte:.3f} tokens per input byte",
            f"estimate   ~{human_count(self.estimated_tokens)} tokens, ~{human_count(self.estimated_docs)} documents, "
            f"~{self.estimated_shards:,} shard(s)",
            f"output     {self.output} ({self.output_state})",
        ]
        shown = self.shard_files if len(self.shard_files) <= 4 else [*self.shard_files[:3], "…", self.shard_files[-1]]
        lines += [f"  {name}" for name in shown] + [f"  {MANIFEST_NAME}"]
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


def _output_state(output: str) -> str:
    if is_remote(output):
        return "remote: packed in a local staging directory, then uploaded"
    out = Path(output)
    if not out.exists():
        return "does not exist; will be created"
    if (out / MANIFEST_NAME).exists():
        return "holds a finished dataset: a pack needs --overwrite"
    if (out / JOURNAL_NAME).exists():
        return "holds an unfinished pack: the same job resumes it"
    if out.is_dir() and not any(out.iterdir()):
        return "empty directory"
    return "not empty: a pack refuses a directory holding anything but shardkit files"


def plan_pack(config: PackConfig) -> PackPlan:
    """List the inputs, tokenize a sample and estimate the output; reads inputs, writes nothing."""
    with storage_options_scope(config.inputs, config.storage_options):
        files = list_inputs(config.inputs)
        tok = load_tokenizer(config.tokenize.tokenizer, backend=config.tokenize.backend)
        extra = int(config.tokenize.append_eos) + int(config.tokenize.prepend_bos)
        docs = tokens = chars = 0
        full_bytes = full_tokens = full_docs = 0
        notes: list[str] = []
        for f in files:
            if chars >= SAMPLE_CHARS or docs >= SAMPLE_DOCS:
                break
            texts: list[str] = []
            complete = True
            try:
                for rec in read_records(f, config.reader):
                    if rec.text:
                        texts.append(rec.text)
                        chars += len(rec.text)
                    if chars >= SAMPLE_CHARS or docs + len(texts) >= SAMPLE_DOCS:
                        complete = False
                        break
            except ReaderError as e:  # a dry run reports a bad file and goes on
                notes.append(f"{f.url}: {e}")
                continue
            n_tok = 0
            if texts:
                _ids, lengths = tok.encode_batch(texts)
                n_tok = int(lengths.sum()) + extra * len(texts)
            docs += len(texts)
            tokens += n_tok
            if complete:
                full_bytes += f.size
                full_tokens += n_tok
                full_docs += len(texts)
    total = sum(f.size for f in files)
    if full_bytes:
        rate = full_tokens / full_bytes
        doc_rate = full_docs / full_bytes
    else:
        rate = tokens / chars if chars else 0.0
        doc_rate = docs / chars if chars else 0.0
        notes.append("no input file fit whole in the sample: the estimate assumes one input byte per character "
                     "(compressed inputs hold more)")
    dtype = token_dtype_for_vocab(tok.spec.vocab_size)
    est_tokens = round(rate * total)
    # a shard rolls over before a document that does not fit: it holds whole documents of the average size
    capacity = config.limits.capacity_tokens(dtype.itemsize)
    avg_doc = tokens / docs if docs else 1.0
    per_shard = max(1, math.floor(capacity / avg_doc)) * avg_doc if avg_doc < capacity else avg_doc
    shards = max(1, math.ceil(est_tokens / per_shard))
    prefix = config.task.shard_prefix if config.task is not None else "shard"
    ext = ".bin.zst" if config.compression.enabled else ".bin"
    names = [f"{prefix}-{i:05d}{ext} .idx .sum.json" for i in range(shards)]
    return PackPlan(
        output=config.output, output_state=_output_state(config.output),
        inputs=[{"url": f.url, "bytes": f.size, "format": input_format(f.url).value} for f in files],
        input_bytes=total, tokenizer=tok.spec.name, dtype=dtype.name, sample_docs=docs, sample_tokens=tokens,
        tokens_per_input_byte=rate, estimated_tokens=est_tokens, estimated_docs=round(doc_rate * total),
        estimated_shards=shards, shard_files=names, notes=notes)
