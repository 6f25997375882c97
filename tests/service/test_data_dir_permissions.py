"""The data directory holds the spans (prompts and responses): ``serve`` keeps it its user's only (issue 16,
failure 6: created 0755 with files 0644, readable by every local user). A real ``serve`` stores spans, stops, and
every directory below the data directory is 0700, every file 0600; an existing world-readable directory is
tightened at start."""

from __future__ import annotations

import os
import stat

import httpx
from support.otlp_senders import chat_spans, encode, new_conversation, post_body
from support.serve_process import ServeProcess


def modes(root) -> dict[str, int]:
    out = {".": stat.S_IMODE(os.stat(root).st_mode)}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            if not os.path.islink(path):
                out[os.path.relpath(path, root)] = stat.S_IMODE(os.lstat(path).st_mode)
    return out


def test_serve_keeps_the_data_directory_private(tmp_path):
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    os.chmod(data, 0o755)  # as an older version (or a umask of 022) left it
    with ServeProcess(data) as proc:
        with httpx.Client(base_url=proc.otlp, timeout=30) as client:
            assert post_body(client, encode(chat_spans(5, new_conversation()))).status_code == 200
        proc.terminate()
        assert proc.wait(120) == 0
    found = modes(data)
    assert found["."] == 0o700
    assert any(name.startswith("chdb") for name in found) and "admin-token" in found and "api-token" in found
    loose = {name: oct(mode) for name, mode in found.items() if mode & 0o077}
    assert not loose, loose  # nothing readable, writable or searchable by group or others
