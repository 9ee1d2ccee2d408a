"""The front door as an attacker or a careless client meets it (issue 39), on loopback: the gateway
as a real subprocess (test_gateway.Gateway) in front of a small recording engine, with httpx and
raw sockets as clients. Each test names the finding it covers."""

from __future__ import annotations

import json
import socket
import threading
import time

import httpx
import pytest
from loopback_http import LoopbackServer, Quiet
from test_gateway import Gateway

KEY = "sk-front-door-test-key-0001"  # made up for these tests
ENGINE_KEY = "engine-key-made-up-for-tests"


class Engine(LoopbackServer):
    """An engine on loopback that answers every request 200 with a completion and records what
    reached it (method, path, Authorization); /health answers 200. A path with `?slow=S` is answered
    after S seconds."""

    def __init__(self):
        seen = self.seen = []

        class Handler(Quiet):
            protocol_version = "HTTP/1.1"

            def _answer(self):
                n = int(self.headers.get("content-length") or 0)
                self.rfile.read(n)
                seen.append((self.command, self.path, self.headers.get("Authorization")))
                if "slow=" in self.path:
                    time.sleep(float(self.path.rsplit("slow=", 1)[1]))
                body = json.dumps({"choices": [{"index": 0, "text": "1, 2", "finish_reason": "stop"}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer

        super().__init__(Handler)


@pytest.fixture(scope="module")
def engine():
    e = Engine()
    yield e
    e.stop()


@pytest.fixture(scope="module")
def keyed(engine, tmp_path_factory):
    """A gateway asking for KEY (from its keys file), in front of an engine asking for ENGINE_KEY."""
    import os

    tmp = tmp_path_factory.mktemp("gw-keys")
    keys = tmp / "keys"
    keys.write_text(f"# clients\n\n{KEY}\nsecond-key-made-up\n")
    os.environ["SPARKCTL_GATEWAY_ENGINE_API_KEY"] = ENGINE_KEY
    try:
        g = Gateway(str(tmp), engine.base, "--api-keys-file", str(keys), "--long-context-tokens", "8",
                    "--long-context-queue", "0")  # fmt: skip
    finally:
        del os.environ["SPARKCTL_GATEWAY_ENGINE_API_KEY"]
    yield g
    g.stop()


def completion(client: httpx.Client, key: str | None = None, **kw) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    body = {"model": "m", "prompt": "Count from 1 to 10, slowly please.", "max_tokens": 4}
    return client.post("/v1/completions", json=body, headers=headers, **kw)


def test_finding_1_without_a_key_the_answer_is_401_in_openais_shape_and_nothing_reaches_the_engine(engine, keyed):
    before = len(engine.seen)
    for key in (None, "wrong-key", KEY[:-1]):
        r = completion(keyed.client, key)
        assert r.status_code == 401, r.text
        err = r.json()["error"]
        assert err["type"] == "AuthenticationError" and err["code"] == 401 and "Authorization: Bearer" in err["message"]
    # on the Anthropic Messages API, in its shape (what vLLM's translate_error_response gives there)
    r = keyed.client.post("/v1/messages", json={"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 401 and r.json()["type"] == "error", r.text
    assert r.json()["error"]["type"] == "authentication_error" and "Authorization: Bearer" in r.json()["error"]["message"]
    assert len(engine.seen) == before


def test_finding_1_with_a_key_it_is_served_and_the_engine_gets_its_own_key_not_the_clients(engine, keyed):
    r = completion(keyed.client, KEY)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["text"] == "1, 2"
    method, path, auth = engine.seen[-1]
    assert (method, path, auth) == ("POST", "/v1/completions", f"Bearer {ENGINE_KEY}")
    assert completion(keyed.client, "second-key-made-up").status_code == 200  # every key in the file
    # however the client spells the header, the engine gets its own key, once
    r = keyed.client.post("/v1/completions", json={"prompt": "x"}, headers={"authorization": f"bearer {KEY}"})
    assert r.status_code == 200 and engine.seen[-1][2] == f"Bearer {ENGINE_KEY}"
    # what a load balancer asks stays open
    assert keyed.client.get("/health").status_code == 200


def test_finding_1_sparkctls_engine_route_is_behind_the_key_and_never_held(engine, keyed):
    assert keyed.client.post("/gateway/engine/v1/completions", json={"prompt": "x"}).status_code == 401
    keyed.hold(expected_s=5, reason="test")
    try:
        r = keyed.client.post(
            "/gateway/engine/v1/completions?x=1", json={"prompt": "x"}, headers={"Authorization": f"Bearer {KEY}"}
        )
        assert r.status_code == 200, r.text
        assert engine.seen[-1] == ("POST", "/v1/completions?x=1", f"Bearer {ENGINE_KEY}")
        assert keyed.client.get("/gateway/engine/health").status_code == 200  # open, like /health
    finally:
        keyed.release()


def test_finding_6_requests_without_a_key_are_neither_held_nor_queued(engine, keyed):
    """Two keyless long requests filled the long-context queue before; now they are turned away first."""
    long_body = {"model": "m", "prompt": "x" * 64, "max_tokens": 1}
    keyed.hold(expected_s=5, reason="test")
    try:
        for _ in range(3):
            assert keyed.client.post("/v1/completions", json=long_body, timeout=5).status_code == 401
        st = keyed.status()
        assert st["held_requests"] == 0 and st["long_context"]["waiting"] == 0
    finally:
        keyed.release()
    # the queue (0 places, one slot) is still free for a client with the key
    r = keyed.client.post("/v1/completions", json=long_body, headers={"Authorization": f"Bearer {KEY}"})
    assert r.status_code == 200, r.text


def test_a_gateway_without_a_keys_file_asks_for_the_engines_key(engine, tmp_path, monkeypatch):
    monkeypatch.setenv("SPARKCTL_GATEWAY_ENGINE_API_KEY", ENGINE_KEY)
    g = Gateway(str(tmp_path), engine.base)
    try:
        assert completion(g.client).status_code == 401
        assert completion(g.client, ENGINE_KEY).status_code == 200
    finally:
        g.stop()


# ---- bounds (finding 2, 5) ----


@pytest.fixture(scope="module")
def bounded(engine, tmp_path_factory):
    """A gateway that takes bodies of 1000 bytes at most, 2500 bytes of them at once, a body within
    1 s and a request's headers within 1 s."""
    g = Gateway(str(tmp_path_factory.mktemp("gw-bounds")), engine.base, "--max-body-bytes", "1000",
                "--max-buffered-bytes", "2500", "--body-timeout-s", "1", "--header-timeout-s", "1")  # fmt: skip
    # this gateway closes a connection idle for 1 s: a kept-alive one reused at that moment is closed
    # under the request ("Server disconnected without sending a response", ci51's floors beside stress)
    g.client.close()
    g.client = httpx.Client(base_url=g.base, timeout=60, limits=httpx.Limits(max_keepalive_connections=0))
    yield g
    g.stop()


def padded(n: int) -> bytes:
    """A JSON completion request of exactly n bytes."""
    head = b'{"model": "m", "prompt": "'
    return head + b"x" * (n - len(head) - 2) + b'"}'


def test_finding_2_a_body_past_the_limit_is_413_before_it_is_read_whole(engine, bounded):
    before = len(engine.seen)
    r = bounded.client.post("/v1/completions", content=padded(1001), headers={"Content-Type": "application/json"})
    assert r.status_code == 413 and r.json()["error"]["code"] == 413 and "1000 bytes" in r.json()["error"]["message"]

    def chunks():  # no Content-Length: counted as it comes
        for _ in range(11):
            yield b"x" * 100

    r = bounded.client.post("/v1/completions", content=chunks())
    assert r.status_code == 413
    assert len(engine.seen) == before
    assert bounded.client.post("/v1/completions", content=padded(1000)).status_code == 200


def test_finding_2_held_bodies_are_bounded_past_it_503_with_retry_after(engine, bounded):
    bounded.hold(expected_s=5, reason="test")
    answers: list = []

    def send(size: int):
        with httpx.Client(base_url=bounded.base, timeout=30) as c:
            answers.append(c.post("/v1/completions", content=padded(size)).status_code)

    held = [threading.Thread(target=send, args=(1000,)) for _ in range(2)]
    try:
        for t in held:
            t.start()
        bounded.wait_status(lambda st: st["held_requests"] == 2)
        r = bounded.client.post("/v1/completions", content=padded(1000))  # 3000 > 2500 bytes
        assert r.status_code == 503 and r.headers["Retry-After"] == "5", r.text
        assert "bytes of request bodies" in r.json()["error"]["message"]
        held.append(threading.Thread(target=send, args=(400,)))  # 2400 bytes fit: held like the others
        held[-1].start()
        bounded.wait_status(lambda st: st["held_requests"] == 3)
    finally:
        bounded.release()
        for t in held:
            t.join(30)
    assert answers == [200, 200, 200]
    assert bounded.metrics()["sparkctl_gateway_rejected_total{reason=buffer_full}"] == 1
    assert bounded.metrics()["sparkctl_gateway_buffered_bytes{}"] == 0  # every body let go with its request


def test_finding_5_headers_that_never_end_and_a_body_that_never_comes_are_cut(bounded):
    import socket

    port = bounded.port
    with socket.create_connection(("127.0.0.1", port), timeout=15) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ")  # and nothing more
        assert s.recv(1024) == b""  # closed by the gateway, not by this socket's 15 s
    with socket.create_connection(("127.0.0.1", port), timeout=15) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n" + b"x" * 10)
        answer = s.recv(4096)
        assert answer.startswith(b"HTTP/1.1 408"), answer


# ---- the launch sparkctl renders (findings 1, 2, 5, 7) ----


def test_finding_1_behind_a_gateway_the_engine_listens_on_loopback_and_the_gateway_gets_the_keys():
    from hostfacts import inventory
    from test_gateway_launch import changed, head_serve_line

    from sparkctl.launch.plan import render

    inv = changed(inventory(), gateway__api_keys_file="/etc/sparkctl/api-keys", runtime__env={"VLLM_API_KEY": ENGINE_KEY})
    plan = render(inv)
    assert "--host 127.0.0.1 --port 8001" in head_serve_line(plan)  # the gateway is the only way in
    gw = plan.gateway
    at = gw.command.index("--api-keys-file")
    mount = next(m for m in gw.mounts if m.target == gw.command[at + 1])
    assert mount.source == "/etc/sparkctl/api-keys" and mount.read_only
    assert gw.env["SPARKCTL_GATEWAY_ENGINE_API_KEY"] == ENGINE_KEY and ENGINE_KEY not in gw.command  # never argv
    # without a gateway the engine is the door, on every interface
    alone = render(changed(inventory(), gateway__enabled=False))
    assert "--host 0.0.0.0 --port" in head_serve_line(alone)


def test_finding_2_and_5_the_gateway_container_has_memory_and_file_limits_and_every_container_rotates_its_log():
    from hostfacts import inventory
    from test_gateway_launch import changed

    from sparkctl.launch.plan import render

    plan = render(inventory())
    gw = plan.gateway
    assert gw.memory_bytes == 1 << 30 and gw.ulimits == {}  # the daemon's open-file limit, raised to by the gateway
    assert render(changed(inventory(), gateway__open_files=16384)).gateway.ulimits == {"nofile": 16384}
    assert gw.command[gw.command.index("--max-body-bytes") + 1] == str(32 << 20)
    assert gw.command[gw.command.index("--max-buffered-bytes") + 1] == str(512 << 20)
    for spec in plan.all_containers:
        argv = spec.docker_run_argv()
        assert "--log-opt=max-size=50m" in argv and "--log-opt=max-file=3" in argv, spec.name


# ---- an engine that stops answering, and the pool (findings 3, 4) ----


def test_finding_3_an_engine_that_answers_nothing_is_a_504_then_the_gateway_holds(tmp_path):
    """The engine stopped (SIGSTOP): the kernel still takes connections, nothing answers, /health neither."""
    stopped = socket.socket()
    stopped.bind(("127.0.0.1", 0))
    stopped.listen(64)  # never accepted: what a stopped process's listening socket does
    g = Gateway(str(tmp_path), f"http://127.0.0.1:{stopped.getsockname()[1]}", "--upstream-idle-s", "1", "--hold-s", "2")
    try:
        r = completion(g.client, timeout=20)
        assert r.status_code == 504 and r.json()["error"]["type"] == "GatewayTimeoutError", r.text
        st = g.status()
        assert st["state"] == "holding" and st["upstream_down_for_s"] is not None, st  # doctor's gateway.engine reads this
        assert g.metrics()["sparkctl_gateway_upstream_errors_total{kind=stalled}"] == 1
        # doctor names it: a stopped engine, not one that refuses connections
        from test_checks import H, by
        from test_gateway_observed import doctor

        from sparkctl.facts.gateway import fetch

        found = by(doctor(fetch("127.0.0.1", g.port)), "gateway.engine", H)
        assert found.status == "failed" and "has stopped answering (1 request(s) got nothing" in found.message, found.message
        later = completion(g.client, timeout=20)  # held while it stays silent, then answered as the hold says
        assert later.status_code == 503 and later.headers["Retry-After"], later.text
    finally:
        g.stop()
        stopped.close()


def test_finding_4_long_streams_filling_upstream_connections_are_not_an_engine_down(engine, tmp_path):
    g = Gateway(str(tmp_path), engine.base, "--upstream-connections", "1", "--connect-timeout-s", "0.3")
    try:
        first: list = []
        busy = threading.Thread(target=lambda: first.append(g.client.post("/v1/completions?slow=2", json={}).status_code))
        before = len(engine.seen)
        busy.start()
        while len(engine.seen) == before:  # the one connection is the first request's
            time.sleep(0.01)
        assert completion(g.client, KEY).status_code == 200  # waited for the connection, in order
        busy.join(30)
        assert first == [200]
        m = g.metrics()
        assert m["sparkctl_gateway_upstream_errors_total{kind=connect}"] == 0  # no engine-down verdict
        assert g.status()["state"] == "passing"
    finally:
        g.stop()


# ---- the small items (finding 7) ----


def test_finding_7_the_admin_socket_refuses_nan_and_infinity(keyed):
    for body in ('{"ttl_s": NaN}', '{"expected_s": Infinity}', '{"ttl_s": -Infinity}'):
        r = keyed.admin_client.post("/hold", content=body, headers={"Content-Type": "application/json"})
        assert r.status_code == 400 and "finite number" in r.json()["error"], (body, r.text)
    assert keyed.status()["hold"] is None  # no hold was made


def test_finding_7_an_absolute_form_target_is_a_400_not_a_500_and_a_traceback(keyed):
    with socket.create_connection(("127.0.0.1", keyed.port), timeout=15) as s:
        s.sendall(f"GET http://elsewhere.example/v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n\r\n".encode())
        answer = s.recv(4096)
    assert answer.startswith(b"HTTP/1.1 400"), answer
    assert b"must be a path" in answer
    assert "Traceback" not in keyed.proc.log()


def test_finding_7_on_sigterm_a_request_held_for_a_down_engine_is_answered_503(tmp_path):
    refused = socket.socket()
    refused.bind(("127.0.0.1", 0))  # bound, never listening: connection refused
    g = Gateway(str(tmp_path), f"http://127.0.0.1:{refused.getsockname()[1]}", "--hold-s", "60", "--shutdown-timeout-s", "5")
    answers: list = []
    try:
        t = threading.Thread(target=lambda: answers.append(completion(g.client, timeout=30)))
        t.start()
        g.wait_status(lambda st: st["held_requests"] == 1)
        g.proc.stop()  # SIGTERM
        t.join(30)
        assert answers and answers[0].status_code == 503 and answers[0].headers["Retry-After"], answers
        assert "restarting" in answers[0].json()["error"]["message"]
    finally:
        g.client.close()
        g.admin_client.close()
        refused.close()


def test_finding_7_a_secrets_fingerprint_in_state_files_is_128_bits_of_a_slow_hash():
    import hashlib

    from sparkctl.transport.redact import DIGEST_SALT, digest, redact_obj

    d = digest("hunter2")
    kind, _, value = d.partition(":")
    assert kind == "scrypt" and len(bytes.fromhex(value)) == 16  # was sha256 and 48 bits
    assert hashlib.sha256(DIGEST_SALT + b"hunter2").hexdigest()[:12] not in d
    assert redact_obj({"env": {"VLLM_API_KEY": "hunter2"}}, digests=True)["env"]["VLLM_API_KEY"] == "***" + d
    assert digest("hunter3") != d and digest("hunter2") == d  # a change stays visible, the same value the same


def test_finding_7_state_files_salt_a_secrets_fingerprint_with_the_clusters_name():
    from hostfacts import inventory
    from test_gateway_launch import changed

    from sparkctl.reload import restore_secrets
    from sparkctl.transport.redact import redact_obj, state_digests

    # one guess is good for one cluster's files: the same secret, another cluster, another fingerprint
    assert state_digests("lab")("hunter2") != state_digests("other")("hunter2")
    inv = changed(inventory(), runtime__env={"VLLM_API_KEY": "hunter2"})
    recorded = redact_obj(inv.model_dump(mode="json"), digests=state_digests(inv.cluster.name))
    assert recorded["runtime"]["env"]["VLLM_API_KEY"] == "***" + state_digests(inv.cluster.name)("hunter2")
    assert restore_secrets(recorded, inv).runtime.env["VLLM_API_KEY"] == "hunter2"  # a rollback gets it back


def test_a_record_written_with_the_old_fingerprint_still_gives_its_secrets_back():
    """The last good config sparkctl rolls back to may have been recorded before the fingerprint changed."""
    from hostfacts import inventory
    from test_gateway_launch import changed

    from sparkctl.reload import restore_secrets
    from sparkctl.transport.redact import legacy_digest

    inv = changed(inventory(), runtime__env={"VLLM_API_KEY": ENGINE_KEY})
    old_record = inv.model_dump(mode="json")
    old_record["runtime"]["env"]["VLLM_API_KEY"] = "***" + legacy_digest(ENGINE_KEY)
    assert restore_secrets(old_record, inv).runtime.env["VLLM_API_KEY"] == ENGINE_KEY


def test_finding_1_sparkctls_own_calls_send_the_engines_key_without_a_gateway(engine):
    """VLLM_API_KEY in runtime.env made `up` fail: its smoke completion sent no key and got 401."""
    from hostfacts import inventory
    from test_gateway_launch import changed

    from sparkctl import httpclient
    from sparkctl.runtime import health
    from sparkctl.steps.base import RunContext

    port = int(engine.base.rsplit(":", 1)[1])
    inv = changed(inventory(), gateway__enabled=False, runtime__port=port, runtime__env={"VLLM_API_KEY": ENGINE_KEY},
                  hosts__head__ssh__address="127.0.0.1")  # fmt: skip
    RunContext(inventory=inv, fleet=None)  # a run: its calls to this cluster send its key
    before = len(engine.seen)
    with httpclient.client(trust_env=False) as http:
        assert health.smoke(http, f"http://127.0.0.1:{port}", "m") == "1, 2"
        http.get(f"{engine.base}/health")
    assert [a for _, _, a in engine.seen[before:]] == [f"Bearer {ENGINE_KEY}"] * 2
    other = Engine()  # never to another address
    try:
        with httpclient.client(trust_env=False) as http:
            http.get(f"{other.base}/health")
        assert other.seen == [("GET", "/health", None)]
    finally:
        other.stop()


def test_metrics_stay_readable_by_prometheus_with_the_key():
    from hostfacts import inventory
    from test_gateway_launch import changed

    from sparkctl.alerts.render import scrape_config
    from sparkctl.alerts.rules import rules_for

    inv = changed(inventory(), gateway__api_keys_file="/etc/sparkctl/api-keys")
    job = scrape_config(rules_for(inv), inv, ["rules.yml"])["scrape_configs"][0]
    assert job["authorization"] == {"type": "Bearer", "credentials_file": "/etc/prometheus/sparkctl-lab.key"}
    assert job["static_configs"][0]["labels"]["__metrics_path__"] == "/gateway/engine/metrics"
    assert "authorization" not in scrape_config(rules_for(inventory()), inventory(), [])["scrape_configs"][0]  # no key asked


def test_finding_5_the_gateway_raises_its_open_file_limit_to_the_hard_one_and_says_when_a_hold_would_not_fit(caplog):
    import resource

    from sparkctl.gateway.server import open_files

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    low = min(256, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (low, hard))  # Python's start in a container: often 1024
    try:
        assert open_files(hold_queue=16) == hard == resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if hard != resource.RLIM_INFINITY:
            open_files(hold_queue=hard)  # a full hold would need twice the files: said in the log
            assert "a full hold may run out of files" in caplog.text
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_keys_file_missing_on_the_head_blocks_the_gateway_before_it_is_touched():
    """docker would bind a missing file as an empty directory: a gateway asking no key."""
    from hostfacts import host_facts, inventory, sec
    from test_gateway_launch import changed

    from sparkctl.steps.base import RunContext
    from sparkctl.steps.gateway import GatewayStep

    inv = changed(inventory(), gateway__api_keys_file="/etc/sparkctl/api-keys")

    def plan(keys: str):
        f = {"head": host_facts(inv, "head", containers=sec("[]"), gateway_code=sec("present\n"), gateway_keys=sec(keys))}
        return GatewayStep().plan(RunContext(inventory=inv, fleet=None, facts=f))["head"]

    missing = plan("missing\n")
    assert missing.blocked and "gateway.api_keys_file /etc/sparkctl/api-keys is not a readable file" in missing.blocked
    assert [c.action for c in plan("readable\n").changes] == ["start", "wait"]


def test_doctor_says_when_the_cluster_asks_no_key_and_when_its_keys_file_is_missing():
    from hostfacts import host_facts, inventory, sec
    from test_checks import H, by
    from test_gateway_launch import changed

    from sparkctl.checks.base import Context
    from sparkctl.checks.doctor import run_checks, select

    def keys_check(inv, **sections):
        ctx = Context(inventory=inv, hosts=list(inv.hosts), facts={"head": host_facts(inv, "head", **sections)})
        return by(run_checks(ctx, [c for c in select() if c.name == "gateway.keys"]), "gateway.keys", H)

    open_door = keys_check(inventory())
    assert open_door.status == "warn" and "asks for no key" in open_door.message
    keyed = changed(inventory(), gateway__api_keys_file="/etc/sparkctl/api-keys")
    assert keys_check(keyed, gateway_keys=sec("readable\n")).status == "ok"
    missing = keys_check(keyed, gateway_keys=sec("missing\n"))
    assert missing.status == "failed" and "chmod 0600 /etc/sparkctl/api-keys" in missing.fix
