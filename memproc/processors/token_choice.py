"""What the TOKENIZER setting's default, "auto", counts with, decided without loading a vocabulary or
touching the network, so `manage.py check` can say it too.

In order, the first of:

1. `TiktokenCounter`, when tiktoken's o200k_base file is in tiktoken's cache. "auto" never lets
   tiktoken download it: tiktoken fetches with no timeout, and a turn must not wait on a network
   that is not there. Naming TiktokenCounter in the setting allows the download.
2. `QuicktokCounter`, when quicktok-v1 (the `offline-tokens` extra) is installed: the same ids.
3. `CharEstimateCounter`, an estimate (`manage.py check` warns: memproc.W009).

`memproc.processors.tokens.get_token_counter()` builds the choice once per process, at first use.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "AUTO",
    "AUTO_ENCODING",
    "TIKTOKEN_FILES",
    "AutoChoice",
    "auto_counter_choice",
    "tiktoken_cached_file",
]

AUTO = "auto"
AUTO_ENCODING = "o200k_base"

# Where tiktoken (0.7 to 0.14, tiktoken_ext.openai_public) fetches each encoding file, and the SHA-256
# it expects: what it looks for in its cache. Should a later tiktoken move a file, "auto" finds no
# cached file and takes the next counter; it never waits on a download.
TIKTOKEN_FILES: dict[str, tuple[str, str]] = {
    "o200k_base": (
        "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    ),
    "cl100k_base": (
        "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    ),
}


TIKTOKEN = "memproc.processors.tokens.TiktokenCounter"
QUICKTOK = "memproc.processors.tokens.QuicktokCounter"
ESTIMATE = "memproc.processors.tokens.CharEstimateCounter"


@dataclass(frozen=True)
class AutoChoice:
    """What "auto" builds (`spec`, a dotted path, with `options`) and why, in a sentence."""

    spec: str
    options: dict[str, Any] = field(default_factory=dict)
    reason: str = ""

    @property
    def exact(self) -> bool:
        return self.spec != ESTIMATE


def auto_counter_choice(*, skip: frozenset[str] = frozenset()) -> AutoChoice:
    """The counter "auto" picks here and now, without loading a vocabulary or touching the network:
    tiktoken when its o200k_base file is cached, else quicktok when installed, else the estimate.
    `skip` leaves out counters (dotted paths) that failed to build."""
    if TIKTOKEN not in skip:
        if not _installed("tiktoken"):
            tiktoken_reason = "tiktoken is not installed"
        else:
            cached = tiktoken_cached_file(AUTO_ENCODING)
            if cached is not None:
                return AutoChoice(
                    TIKTOKEN,
                    {"encoding": AUTO_ENCODING},
                    f"tiktoken's {AUTO_ENCODING} file is cached ({cached})",
                )
            tiktoken_reason = (
                f"tiktoken's {AUTO_ENCODING} file is not in its cache ({_tiktoken_cache_dir() or 'disabled'})"
            )
    else:
        tiktoken_reason = "tiktoken failed to load it"
    if QUICKTOK not in skip and _installed("quicktok"):
        return AutoChoice(
            QUICKTOK, {"encoding": AUTO_ENCODING}, f"{tiktoken_reason}; quicktok-v1 is installed"
        )
    return AutoChoice(
        ESTIMATE, {}, f"{tiktoken_reason}, and quicktok-v1 is not installed: token counts are estimates"
    )


def tiktoken_cached_file(encoding: str) -> Path | None:
    """The file tiktoken would read `encoding` from without downloading it: in its cache, with the
    content tiktoken checks for (a file that does not match, tiktoken deletes and downloads again).
    None when it is not there, or when `encoding` is not one memproc knows the file of."""
    known = TIKTOKEN_FILES.get(encoding)
    cache_dir = _tiktoken_cache_dir()
    if known is None or not cache_dir:
        return None
    url, sha256 = known
    path = Path(cache_dir) / hashlib.sha1(url.encode()).hexdigest()  # tiktoken's cache key
    try:
        data = path.read_bytes()
    except OSError:
        return None
    return path if hashlib.sha256(data).hexdigest() == sha256 else None


def _tiktoken_cache_dir() -> str:
    """Where tiktoken caches files, looked up as tiktoken does ("": caching is off)."""
    if "TIKTOKEN_CACHE_DIR" in os.environ:
        return os.environ["TIKTOKEN_CACHE_DIR"]
    if "DATA_GYM_CACHE_DIR" in os.environ:
        return os.environ["DATA_GYM_CACHE_DIR"]
    return os.path.join(tempfile.gettempdir(), "data-gym-cache")


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False
