"""Remote storage (any fsspec URL): URL resolution, retries of transient errors, and staged uploads.

`fs` and `retry` are shared by the pack (uploads) and the loader (remote reads and caches); they stay small.
"""

from __future__ import annotations

from .fs import filesystem, is_remote, join
from .retry import RetryPolicy, retrying

__all__ = ["RetryPolicy", "filesystem", "is_remote", "join", "retrying"]
