"""A tiktoken BPE ranks file (`base64-token rank` per line), with its split pattern and specials.

Spec: `tiktoken:PATH[?pattern=gpt2|cl100k|o200k|REGEX][&special=TOKEN:ID,...][&eos=TOKEN][&bos=TOKEN]`.
Without `special`, `<|endoftext|>` gets the id after the last rank (as in GPT-2's r50k).
"""

from __future__ import annotations

import base64
from pathlib import Path
from urllib.parse import parse_qs

from ..errors import TokenizerError
from .base import TokenizerSpec, file_sha256
from .fastpath import GPT2_PATTERN, TiktokenTokenizer

__all__ = ["load_tiktoken_file", "NAMED_PATTERNS"]

NAMED_PATTERNS = {
    "gpt2": GPT2_PATTERN,
    "cl100k": r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s""",
    "o200k": "|".join([
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""", r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""", r"""\s*[\r\n]+""", r"""\s+(?!\S)""", r"""\s+""",
    ]),
}


def _read_ranks(path: Path) -> dict[bytes, int]:
    ranks: dict[bytes, int] = {}
    n = 0
    try:
        for lineno, line in enumerate(path.read_bytes().splitlines(), 1):
            n = lineno  # kept for the error message below
            if not line.strip():
                continue
            token, rank = line.split()
            ranks[base64.b64decode(token, validate=True)] = int(rank)
    except FileNotFoundError:
        raise TokenizerError(f"{path}: tiktoken ranks file not found") from None
    except (ValueError, base64.binascii.Error) as e:
        raise TokenizerError(f"{path}:{n}: not a tiktoken ranks line ('base64 rank'): {e}") from None
    return ranks


def load_tiktoken_file(spec: str) -> TiktokenTokenizer:
    import tiktoken

    path_part, _, query = spec.partition("?")
    path = Path(path_part)
    opts = {k: v[-1] for k, v in parse_qs(query, keep_blank_values=True).items()}
    ranks = _read_ranks(path)
    pattern = NAMED_PATTERNS.get(opts.get("pattern", "gpt2"), opts.get("pattern", GPT2_PATTERN))
    if "special" in opts:
        special = {}
        for item in filter(None, opts["special"].split(",")):
            tok, _, tid = item.rpartition(":")
            if not tok or not tid.isdigit():
                raise TokenizerError(f"special={opts['special']!r}: expected TOKEN:ID[,TOKEN:ID…]")
            special[tok] = int(tid)
    else:
        special = {"<|endoftext|>": max(ranks.values(), default=-1) + 1}
    try:
        enc = tiktoken.Encoding(name=path.name, pat_str=pattern, mergeable_ranks=ranks, special_tokens=special)
    except Exception as e:  # tiktoken raises ValueError / pyo3 errors on bad input
        raise TokenizerError(f"{path}: tiktoken rejected this encoding ({e})") from None
    vocab = {**{k.decode("latin-1"): v for k, v in ranks.items()}, **special}
    eos = opts.get("eos", "<|endoftext|>")
    bos = opts.get("bos")
    tok = TiktokenTokenizer(enc, TokenizerSpec(
        kind="tiktoken", name=path.name, path=spec, vocab_size=max(vocab.values()) + 1,
        eos_id=special.get(eos), bos_id=special.get(bos) if bos else None, sha256=file_sha256(str(path)),
        backend="tiktoken"))
    return tok


