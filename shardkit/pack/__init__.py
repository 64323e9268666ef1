"""The pack driver: sources → readers → tokenizer pool → ordered writer → manifest."""

from .config import OnError, PackConfig, ResumeMode, TokenizeOptions
from .driver import PackProgress, PackResult, pack

__all__ = ["OnError", "PackConfig", "PackProgress", "PackResult", "ResumeMode", "TokenizeOptions", "pack"]
