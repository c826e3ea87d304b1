"""The reference publishing service (tools/publishing_service.py) keeps its contract, faults
included, and the client (tools/publishing_client.py) maps every outcome onto NotSent, Conflict and
MayHaveActed. Offline: the service runs on 127.0.0.1, in a thread or as a subprocess."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from tools.publishing_client import PublishingClient, from_settings
from tools.publishing_service import start_in_thread
from workflow.external import Conflict, MayHaveActed, NotDeduplicating, NotSent

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "s3cret-token-for-tests-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
ITEM = {"title": "Hello", "body": "World", "channel": "blog"}
SERVE = [sys.executable, "-c",
         "import sys; from tools.publishing_service import main; sys.exit(main(sys.argv[1:]))"]


@pytest.fixture
def service(tmp_path):
    """``start(**switches) -> url``: a service in a thread on tmp_path/data, stopped after the test."""
    stops = []

    def start(**switches):
        url, stop = start_in_thread(tmp_path / "data", token=TOKEN, **switches)
        stops.append(stop)
        return url

    yield start
    for stop in stops:
        stop()


def post(url, key="k1", item=ITEM, headers=AUTH):
    return httpx.post(f"{url}/v1/publications", json=item, headers={**headers, "Idempotency-Key": key})


def listed(url, **params):
    response = httpx.get(f"{url}/v1/publications", params=params, headers=AUTH)
    assert response.status_code == 200, response.text
    return response.json()["data"]


def test_a_key_creates_once_then_replays_the_same_publication(service):
    url = service()
    first = post(url)
    assert first.status_code == 201 and "Idempotent-Replayed" not in first.headers
    pub = first.json()
    assert set(pub) == {"id", "idempotency_key", "title", "body", "channel", "created_at"}
    assert pub["id"].startswith("pub_") and len(pub["id"]) == 20 and pub["idempotency_key"] == "k1"
    assert pub["created_at"].endswith("Z") and len(pub["created_at"]) == 27
    again = post(url)
    assert again.status_code == 200 and again.headers["Idempotent-Replayed"] == "true"
    assert again.json() == pub
    other = post(url, item={**ITEM, "body": "changed"})
    assert other.status_code == 409 and "error" in other.json()
    assert listed(url) == [pub]


def test_requests_without_the_right_token_or_key_or_body_are_refused(service):
    url = service()
    assert post(url, headers={}).status_code == 401
    assert post(url, headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert httpx.get(f"{url}/v1/publications").status_code == 401
    assert httpx.post(f"{url}/v1/publications", json=ITEM, headers=AUTH).status_code == 400  # no key
    assert httpx.post(f"{url}/v1/publications", content=b"{not json", headers={**AUTH, "Idempotency-Key": "k"}
                      ).status_code == 400
    assert post(url, item={"title": "only"}).status_code == 400
    assert post(url, item={**ITEM, "body": "x" * 70_000}).status_code == 413
    assert listed(url) == []


def test_lookup_by_key_and_the_list_oldest_first(service):
    url = service()
    a, b = post(url, "ka").json(), post(url, "kb", {**ITEM, "title": "second"}).json()
    assert listed(url, idempotency_key="kb") == [b]
    assert listed(url, idempotency_key="nope") == []
    assert listed(url) == [a, b]


def test_without_dedup_every_post_creates_and_there_is_no_lookup(service):
    url = service(dedup=False)
    assert post(url).status_code == 201 and post(url).status_code == 201
    pubs = listed(url)
    assert len(pubs) == 2 and pubs[0]["id"] != pubs[1]["id"] and pubs[0]["idempotency_key"] is None
    assert httpx.get(f"{url}/v1/publications", params={"idempotency_key": "k1"}, headers=AUTH).status_code == 404
    with pytest.raises(NotDeduplicating, match="no lookup by idempotency key"):  # it shows it ignores keys
        PublishingClient(url, TOKEN, timeout_s=5).find("k1")


def test_fail_503_stores_nothing_then_the_same_key_succeeds_once(service):
    url = service(fail_503=2)
    client = PublishingClient(url, TOKEN, timeout_s=5)
    for _ in range(2):
        with pytest.raises(MayHaveActed, match="503"):
            client.publish("k1", **ITEM)
        assert listed(url) == []
    assert client.publish("k1", **ITEM)["idempotency_key"] == "k1"
    assert len(listed(url)) == 1


def test_a_lost_answer_is_may_have_acted_and_the_publication_is_stored(service):
    url = service(lose_answer=1)
    client = PublishingClient(url, TOKEN, timeout_s=5)
    with pytest.raises(MayHaveActed, match="RemoteProtocolError|ReadError"):
        client.publish("k1", **ITEM)
    assert len(listed(url)) == 1
    assert client.find("k1") == listed(url)[0]
    assert client.publish("k1", **ITEM) == listed(url)[0]  # the replay answers this time
    assert len(listed(url)) == 1


def test_a_timeout_after_sending_is_may_have_acted_and_the_publication_exists(service):
    url = service(slow=1.0)
    with pytest.raises(MayHaveActed, match="ReadTimeout|no whole answer within"):
        PublishingClient(url, TOKEN, timeout_s=0.3).publish("k1", **ITEM)
    assert [p["idempotency_key"] for p in listed(url)] == ["k1"]


def test_twenty_concurrent_posts_with_one_key_create_one_publication(service):
    url = service(slow=0.05)
    statuses: list[int] = []
    barrier = threading.Barrier(20)

    def send():
        barrier.wait()
        statuses.append(post(url).status_code)

    threads = [threading.Thread(target=send) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(statuses) == [200] * 19 + [201]
    assert len(listed(url)) == 1


def test_publications_survive_a_restart_on_the_same_data_dir(tmp_path):
    url, stop = start_in_thread(tmp_path / "data", token=TOKEN)
    pub = post(url).json()
    stop()
    url, stop = start_in_thread(tmp_path / "data", token=TOKEN)
    try:
        assert listed(url) == [pub]
        assert post(url).status_code == 200
    finally:
        stop()
    for path in (tmp_path / "data").rglob("*"):
        if path.is_file():
            assert TOKEN.encode() not in path.read_bytes(), path


def test_the_command_prints_its_url_first_and_serves(tmp_path):
    env = {**os.environ, "HITL_PUBLISH_TOKEN": TOKEN}
    proc = subprocess.Popen([*SERVE, "--port", "0", "--data", str(tmp_path / "data"), "--no-dedup"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline().strip()
        assert line.startswith("publishing service: http://127.0.0.1:"), line
        url = line.split(": ", 1)[1]
        assert int(url.rsplit(":", 1)[1]) > 0
        assert post(url).status_code == 201 and post(url).status_code == 201
        assert len(listed(url)) == 2
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    assert TOKEN not in out + err
    for path in (tmp_path / "data").rglob("*"):
        if path.is_file():
            assert TOKEN.encode() not in path.read_bytes(), path


@pytest.mark.parametrize("value", [None, ""])
def test_the_command_refuses_to_start_without_a_token_and_creates_nothing(tmp_path, value):
    env = {k: v for k, v in os.environ.items() if k != "HITL_PUBLISH_TOKEN"}
    if value is not None:
        env["HITL_PUBLISH_TOKEN"] = value
    done = subprocess.run([*SERVE, "--port", "0"], cwd=tmp_path, env={**env, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.strip() == ("STOPPED: HITL_PUBLISH_TOKEN is not set: the service accepts only requests "
                                   "that carry it")
    assert list(tmp_path.iterdir()) == []


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_client_maps_each_outcome(service):
    url = service()
    with pytest.raises(NotSent) as refused:
        PublishingClient(f"http://127.0.0.1:{_closed_port()}", TOKEN, timeout_s=2).publish("k1", **ITEM)
    assert refused.value.retry is True
    # any answer means the request arrived: never "not sent", and not tried again in the command
    for token in (None, "wrong"):
        with pytest.raises(MayHaveActed, match="401") as denied:
            PublishingClient(url, token, timeout_s=5).publish("k1", **ITEM)
        assert denied.value.retry is False
    client = PublishingClient(url, TOKEN, timeout_s=5)
    with pytest.raises(MayHaveActed, match="413") as big:
        client.publish("k1", "t", "x" * 70_000, "blog")
    assert big.value.retry is False
    assert client.find("k1") is None
    pub = client.publish("k1", **ITEM)
    assert client.publish("k1", **ITEM) == pub and client.find("k1") == pub
    with pytest.raises(Conflict, match="409"):
        client.publish("k1", "t", "other", "blog")
    assert TOKEN not in repr(client)


def test_client_messages_never_show_the_token(service):
    url = service(fail_503=1)
    caught = []
    for client, key in ((PublishingClient(url, TOKEN, timeout_s=5), "k1"),
                        (PublishingClient(url, TOKEN + "x", timeout_s=5), "k1"),
                        (PublishingClient(f"http://127.0.0.1:{_closed_port()}", TOKEN, timeout_s=2), "k1")):
        with pytest.raises((NotSent, MayHaveActed)) as exc:
            client.publish(key, **ITEM)
        caught.append(str(exc.value))
    assert all("\n" not in m and TOKEN not in m and url.split("//")[1].split(":")[0] in m for m in caught), caught
    assert "503" in caught[0] and "401" in caught[1]


def test_from_settings_reads_the_publish_variables(monkeypatch):
    monkeypatch.delenv("HITL_PUBLISH_URL", raising=False)
    assert from_settings() is None
    monkeypatch.setenv("HITL_PUBLISH_URL", "http://127.0.0.1:9/")
    monkeypatch.setenv("HITL_PUBLISH_TOKEN", TOKEN)
    monkeypatch.setenv("HITL_PUBLISH_IDEMPOTENCY", "none")
    monkeypatch.setenv("HITL_PUBLISH_TIMEOUT", "1.5")
    client, dedup = from_settings()
    assert (client.url, client.timeout_s, dedup) == ("http://127.0.0.1:9", 1.5, False)
    monkeypatch.setenv("HITL_PUBLISH_IDEMPOTENCY", "key")
    assert from_settings()[1] is True


def _hostile_server(answer: bytes, drip_s: float = 0.0) -> tuple[str, socket.socket]:
    """A one-connection-at-a-time HTTP server on loopback that reads a request and answers
    ``answer``, one byte every ``drip_s`` seconds (0: at once). Returns its URL and socket."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                try:
                    conn.recv(65536)
                    for i in range(len(answer)) if drip_s else [None]:
                        conn.sendall(answer if i is None else answer[i:i + 1])
                        if drip_s:
                            threading.Event().wait(drip_s)
                except OSError:
                    pass

    threading.Thread(target=serve, daemon=True).start()
    return f"http://127.0.0.1:{server.getsockname()[1]}", server


def test_a_dripping_answer_is_given_up_after_the_timeout_in_all():
    """httpx bounds each read, not the request: a service sending a byte every 0.2 s would hold
    the command for minutes. The client gives up after its timeout in all: may have acted."""
    import time

    answer = b"HTTP/1.1 201 Created\r\nContent-Length: 200\r\n\r\n" + b"x" * 200
    url, server = _hostile_server(answer, drip_s=0.2)  # about 50 s to send it all
    try:
        began = time.monotonic()
        # given up by the client's bound on the whole answer (or, on a clock where the drip's
        # pauses stretch past a second, by httpx's own read timeout): either way, quickly
        with pytest.raises(MayHaveActed, match="no whole answer within 1 s|ReadTimeout"):
            PublishingClient(url, "tok-drip-123456789", timeout_s=1.0).publish("k" * 32, "T", "B", "blog")
        assert time.monotonic() - began < 15
    finally:
        server.close()


def test_a_service_that_echoes_the_token_in_its_error_never_puts_it_in_a_message():
    token = "tok-echoed-123456789"
    body = ('{"error": "bad: Bearer ' + token + '"}').encode()
    answer = b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: " + \
        str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body
    url, server = _hostile_server(answer)
    try:
        with pytest.raises(MayHaveActed) as caught:  # an answer: the request arrived
            PublishingClient(url, token, timeout_s=5.0).publish("k" * 32, "T", "B", "blog")
        assert token not in str(caught.value) and "400 Bad Request" in str(caught.value)
    finally:
        server.close()
