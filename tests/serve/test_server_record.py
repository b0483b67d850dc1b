"""`record_at(url)`: the running server edge-deploy started that listens where a URL dials, so `bench --url` finds
its key and TLS identity as `status` does (issue 45 #1). The records are real files in a state dir of tmp_path;
this process stands in for the foreground server that owns one (a record is only read, nothing is dialed)."""
from __future__ import annotations

import os

from edge_deploy.serve.server_record import ServerRecord, process_start, record_at, save_record


def test_a_url_finds_the_record_of_the_server_listening_there(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("EDGE_DEPLOY_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "repo").mkdir()
    (tmp_path / "other").mkdir()
    assert record_at("127.0.0.1:8001") is None
    me = os.getpid()
    foreground = ServerRecord(url="127.0.0.1:18001", repository=tmp_path / "repo", key_header="h",
                              key_file=tmp_path / "k", scope="user", pid=me, pid_start=process_start(me))
    save_record(foreground)
    unit = ServerRecord(url="0.0.0.0:18002", repository=tmp_path / "other", key_header="h", key_file=tmp_path / "k2",
                        scope="user", unit="edge-deploy-triton.service")
    save_record(unit)
    for url in ("127.0.0.1:18001", "localhost:18001"):
        found = record_at(url)
        assert found is not None and found.repository == (tmp_path / "repo").resolve() and found.pid == me, url
    found = record_at("127.0.0.1:18002")  # a unit listening on every address is dialed on loopback
    assert found is not None and found.repository == (tmp_path / "other").resolve()
    assert record_at("127.0.0.1:18003") is None
    gone = ServerRecord(**{**foreground.__dict__, "url": "127.0.0.1:18004", "repository": tmp_path / "other",
                           "pid_start": -1})  # its process is gone (another start time)
    save_record(gone)
    assert record_at("127.0.0.1:18004") is None
