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


READ_EACH = """
from edge_deploy.serve import server_record as sr
repo = P(sys.argv[1])
attempt("foreground", lambda: sr.foreground_records(("user",)))
attempt("at", lambda: sr.record_at("127.0.0.1:8001"))
attempt("remove", lambda: sr.remove_record(sr.ServerRecord("127.0.0.1:8001", repo, "h", repo / "k", "user", pid=1)))
attempt("key", lambda: sr.read_key(sr.ServerRecord("127.0.0.1:8001", repo, "h", repo / "key", "user")))
attempt("holder", lambda: sr.claim_holder(repo))
"""


def test_a_fifo_among_the_state_files_is_refused_in_one_line(tmp_path, monkeypatch) -> None:
    """Issue 54: a FIFO where serve keeps a record, a key or its lock is refused (or passed over) at once, never read
    until something writes to it (plant: path.read_text() back in server_record.py, and the child hangs)."""
    from reader_child import read_in_child

    from edge_deploy.serve.server_record import SERVER_LOCK_NAME, record_path

    monkeypatch.setenv("EDGE_DEPLOY_STATE_DIR", str(tmp_path / "state"))
    env = dict(os.environ)
    repo = tmp_path / "repo"
    repo.mkdir()
    record = record_path("user", repo, "foreground")
    record.parent.mkdir(parents=True)
    os.mkfifo(record)
    os.mkfifo(repo / "key")
    os.mkfifo(repo / SERVER_LOCK_NAME)
    lines = read_in_child(READ_EACH, str(repo), env=env)
    assert len(lines) == 5, lines
    fifo = "is a FIFO (named pipe), not a regular file"
    assert lines["foreground"] == f"ServerError server record {record} {fifo}; remove it; `edge-deploy serve` " \
                                  "writes it anew."
    assert lines["at"] == lines["remove"] == lines["foreground"]
    assert lines["key"] == f"ServerError server key {repo}/key {fifo}; remove it; `edge-deploy serve` writes it anew."
    assert lines["holder"] == "READ None"  # nobody holds a lock there
