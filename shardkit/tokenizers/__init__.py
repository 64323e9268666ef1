"""Stage 3: tokenizers chosen by a spec string, batch-encoding texts to flat NumPy id arrays.

See docs/tokenizers.md: spec strings, backends (fastokens, the tiktoken fast path, `tokenizers`) and
when `auto` takes which.
"""

from .base import Backend, Tokenizer, TokenizerSpec
from .bytes_tokenizer import BYTES_BOS, BYTES_EOS, BYTES_PAD, BytesTokenizer
from .fastokens_backend import FastokensTokenizer
from .fastpath import FastPathRefused, compile_tiktoken, fast_hf_tokenizer
from .hf import HFTokenizer
from .selfcheck import Difference, SelfCheckResult, compare, compare_backends, probe_check
from .sentencepiece_model import SentencePieceTokenizer
from .spec import load_tokenizer, load_tokenizer_checked, parse_spec
from .tiktoken_backend import TiktokenTokenizer
from .tiktoken_file import PRESETS

__all__ = [
    "BYTES_BOS",
    "BYTES_EOS",
    "BYTES_PAD",
    "PRESETS",
    "Backend",
    "BytesTokenizer",
    "Difference",
    "FastPathRefused",
    "FastokensTokenizer",
    "HFTokenizer",
    "SelfCheckResult",
    "SentencePieceTokenizer",
    "TiktokenTokenizer",
    "Tokenizer",
    "TokenizerSpec",
    "compare",
    "compare_backends",
    "compile_tiktoken",
    "fast_hf_tokenizer",
    "load_tokenizer",
    "load_tokenizer_checked",
    "parse_spec",
    "probe_check",
]
