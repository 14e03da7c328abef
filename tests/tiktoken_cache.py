"""tiktoken's encoding files, written offline from quicktok's vocabulary into a tiktoken cache folder.

tiktoken downloads its files from a blob store these machines cannot reach. quicktok-v1 ships the same
vocabularies: the file built here from its ranks has the SHA-256 tiktoken checks for OpenAI's file, so
it is that file, byte for byte (asserted). What a deploy step that warms tiktoken's cache leaves behind.
"""

from __future__ import annotations

import base64
import functools
import hashlib
from pathlib import Path

from memproc.processors.token_choice import TIKTOKEN_FILES


@functools.cache
def tiktoken_file_from_quicktok(encoding: str) -> bytes:
    """tiktoken's file for `encoding` (base64 token, space, rank, one per line), from quicktok's ranks."""
    import quicktok

    vocabulary = quicktok.get_encoding(encoding)
    lines = []
    for rank in range(vocabulary.n_vocab):  # the mergeable ranks run from 0 to the first gap or special token
        if vocabulary.is_special_token(rank):
            break
        try:
            token = vocabulary.decode_single_token_bytes(rank)
        except KeyError:
            break
        lines.append(base64.b64encode(token) + b" %d\n" % rank)
    data = b"".join(lines)
    url, sha256 = TIKTOKEN_FILES[encoding]
    assert hashlib.sha256(data).hexdigest() == sha256, f"quicktok's {encoding} is not the file at {url}"
    return data


def put_in_tiktoken_cache(folder: Path, encoding: str = "o200k_base", data: bytes | None = None) -> Path:
    """Writes tiktoken's file for `encoding` (or `data`) where tiktoken's cache in `folder` has it."""
    url, _ = TIKTOKEN_FILES[encoding]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / hashlib.sha1(url.encode()).hexdigest()  # tiktoken's cache key
    path.write_bytes(tiktoken_file_from_quicktok(encoding) if data is None else data)
    return path
