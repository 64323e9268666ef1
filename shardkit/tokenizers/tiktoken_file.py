"""A tiktoken BPE ranks file (`base64-token rank` per line) with its split regex and special tokens.

A ranks file holds only the mergeable tokens, so the spec string names the rest:

    tiktoken:PATH[?pattern=NAME|REGEX][&special=TOKEN:ID,...][&eos=TOKEN][&bos=TOKEN]

- `pattern`: a preset name (`gpt2`/`r50k_base`, `p50k_base`, `cl100k_base`, `o200k_base`; `_base` may be
  left out) or a regex, percent-encoded where it has `&`, `%` or `#`. Left out, the file's stem must be a
  preset name (`cl100k_base.tiktoken`), as OpenAI's files are.
- `special`: the special tokens (replacing the preset's). Left out, a preset's own are used.
- `eos` / `bos`: which special tokens are EOS/BOS; by default `<|endoftext|>` and none.
"""

from __future__ import annotations

import base64
import binascii
from pathlib import Path
from urllib.parse import unquote

import tiktoken

from ..errors import TokenizerError
from .base import TokenizerSpec, file_sha256
from .bytelevel import GPT2_PATTERN
from .specials import BOS_CANDIDATES, EOS_CANDIDATES, pick_special
from .tiktoken_backend import TiktokenTokenizer

__all__ = ["PRESETS", "load_tiktoken_file", "read_ranks"]

_CL100K = (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|"""
           r"""\s*[\r\n]|\s+(?!\S)|\s""")
_O200K = "|".join([
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""", r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""", r"""\s*[\r\n]+""", r"""\s+(?!\S)""", r"""\s+""",
])
_EOT, _FIM = "<|endoftext|>", ("<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>")

# (split regex, special tokens) of OpenAI's published encodings (tiktoken_ext.openai_public)
PRESETS: dict[str, tuple[str, dict[str, int]]] = {
    "r50k_base": (GPT2_PATTERN, {_EOT: 50256}),
    "p50k_base": (GPT2_PATTERN, {_EOT: 50256}),
    "cl100k_base": (_CL100K, {_EOT: 100257, _FIM[0]: 100258, _FIM[1]: 100259, _FIM[2]: 100260,
                              "<|endofprompt|>": 100276}),
    "o200k_base": (_O200K, {_EOT: 199999, "<|endofprompt|>": 200018}),
}
_ALIASES = {"gpt2": "r50k_base", "r50k": "r50k_base", "p50k": "p50k_base", "cl100k": "cl100k_base",
            "o200k": "o200k_base"}
_OPTIONS = ("pattern", "special", "eos", "bos")


def _preset(name: str) -> str | None:
    return name if name in PRESETS else _ALIASES.get(name)


def read_ranks(path: Path) -> dict[bytes, int]:
    """Token bytes → rank; errors name the line."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise TokenizerError(f"{path}: tiktoken ranks file not found") from None
    except OSError as e:
        raise TokenizerError(f"{path}: cannot read the tiktoken ranks file ({e})") from None
    ranks: dict[bytes, int] = {}
    for lineno, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        try:
            token, rank = line.split()
            ranks[base64.b64decode(token, validate=True)] = int(rank)
        except (ValueError, binascii.Error):
            raise TokenizerError(f"{path}:{lineno}: expected 'BASE64TOKEN RANK', found {line[:60]!r}") from None
    if not ranks:
        raise TokenizerError(f"{path}: the tiktoken ranks file is empty")
    if len(set(ranks.values())) != len(ranks):
        raise TokenizerError(f"{path}: two tokens share a rank; not a tiktoken ranks file")
    return ranks


def _options(query: str, spec: str) -> dict[str, str]:
    opts: dict[str, str] = {}
    for item in filter(None, query.split("&")):
        key, sep, value = item.partition("=")
        if not sep or key not in _OPTIONS:
            raise TokenizerError(f"{spec!r}: unknown option {item!r}; options are {', '.join(_OPTIONS)} "
                                 "(tiktoken:PATH?pattern=cl100k_base&eos=<|endoftext|>)")
        opts[key] = unquote(value)  # not unquote_plus: a regex is full of '+'
    return opts


def _specials(text: str, spec: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in filter(None, text.split(",")):
        token, _, tid = item.rpartition(":")
        if not token or not tid.isdigit():
            raise TokenizerError(f"{spec!r}: special={text!r}: expected TOKEN:ID[,TOKEN:ID...]")
        out[token] = int(tid)
    return out


def load_tiktoken_file(arg: str, *, threads: int = 1, eos: str | None = None,
                       bos: str | None = None) -> TiktokenTokenizer:
    """The tokenizer of `tiktoken:ARG` (ARG = PATH[?options]); `eos`/`bos` override the options."""
    spec = f"tiktoken:{arg}"
    path_part, _, query = arg.partition("?")
    path = Path(path_part)
    opts = _options(query, spec)
    preset = _preset(opts.get("pattern", path.stem))
    if "pattern" not in opts and preset is None:
        raise TokenizerError(f"{spec!r}: the split regex is not known for {path.name}; add "
                             f"?pattern=NAME ({', '.join(PRESETS)}) or ?pattern=REGEX")
    pattern = PRESETS[preset][0] if preset else opts["pattern"]
    ranks = read_ranks(path)
    specials = _specials(opts["special"], spec) if "special" in opts else dict(PRESETS[preset][1]) if preset else {}
    used = set(ranks.values())
    clash = {t: i for t, i in specials.items() if i in used}
    if clash:
        raise TokenizerError(f"{spec!r}: special tokens {clash} collide with ranks in {path.name}; "
                             "give ?special=TOKEN:ID with ids above the last rank")
    try:
        enc = tiktoken.Encoding(name=path.stem, pat_str=pattern, mergeable_ranks=ranks, special_tokens=specials)
    except Exception as e:  # ValueError or a pyo3 error for a bad regex
        raise TokenizerError(f"{spec!r}: tiktoken rejected this encoding ({str(e)[:200]})") from None
    where = str(path)
    tok_spec = TokenizerSpec(
        kind="tiktoken", name=path.name, path=arg, vocab_size=max([*ranks.values(), *specials.values()]) + 1,
        eos_id=pick_special(specials, eos or opts.get("eos"), EOS_CANDIDATES, what="eos", where=where),
        bos_id=pick_special(specials, bos or opts.get("bos"), BOS_CANDIDATES, what="bos", where=where),
        sha256=file_sha256(where), backend="tiktoken")
    return TiktokenTokenizer(enc, tok_spec, threads=threads)
