"""The real-client suite's fixtures: one smsgw server for the session, started from the built
binary on a free loopback port with a temporary SQLite file; a workspace and its keys made with
the CLI; two phones paired and run by `smsgw phone-sim` (child processes), so sends go all the
way to Delivered, the second paced to one SMS per 30 minutes and that one spent at start-up, so
the messages routed to it stay Pending (to cancel); and a webhook receiver on 127.0.0.1 that verifies the SMSGate signature as a receiver written for
the SMSGate app does. Nothing leaves the loopback interface.
"""

import hashlib
import hmac
import http.server
import json
import os
import pathlib
import re
import subprocess
import tempfile
import threading
import time
import urllib.request

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
BINARY = pathlib.Path(os.environ.get("SMSGW_BIN", REPO / "target" / "debug" / "smsgw"))

# The numbers of the two phones (fictional North American numbers).
SIM_PHONE = "+14155550100"
PACED_PHONE = "+14155550101"
# Recipients.
RECIPIENTS = ["+14155550123", "+14155550124"]

START_TIMEOUT_S = 30


def _env(db_url: str) -> dict:
    env = dict(os.environ)
    env.update(
        {
            "SMSGW_DATABASE__URL": db_url,
            "SMSGW_SERVER__BIND": "127.0.0.1:0",
            # The webhook receiver listens on http://127.0.0.1.
            "SMSGW_WEBHOOKS__ALLOW_INSECURE_TARGETS": "true",
            "SMSGW_LOG__LEVEL": "warn",
        }
    )
    return env


def _wait_for_line(path: pathlib.Path, pattern: str, proc: subprocess.Popen) -> re.Match:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        text = path.read_text(errors="replace") if path.exists() else ""
        match = re.search(pattern, text)
        if match:
            return match
        if proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode}:\n{text}")
        time.sleep(0.05)
    raise RuntimeError(f"no line matching {pattern!r} within {START_TIMEOUT_S} s")


class Api:
    """smsgw's own `/v1` API (set-up only: pairing phones, simulated inbound SMS)."""

    def __init__(self, base: str):
        self.base = base

    def call(self, method: str, path: str, key: str, body=None) -> dict:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.base + path,
            data=data,
            method=method,
            headers={"x-api-key": key, "content-type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read() or b"{}")


class Server:
    def __init__(self, base, workspace, live_key, test_key, api, sim_phone_id, paced_phone_id):
        self.base = base
        self.client_url = base + "/3rdparty/v1"
        self.workspace = workspace
        self.live_key = live_key
        self.test_key = test_key
        self.api = api
        self.sim_phone_id = sim_phone_id
        self.paced_phone_id = paced_phone_id


@pytest.fixture(scope="session")
def server():
    if not BINARY.exists():
        pytest.exit(f"{BINARY} is missing: run `cargo build` first", returncode=2)
    tmp = tempfile.TemporaryDirectory(prefix="smsgw-clients-")
    tmp_path = pathlib.Path(tmp.name)
    env = _env(f"sqlite://{tmp_path / 'smsgw.db'}?mode=rwc")
    created = subprocess.run(
        [str(BINARY), "workspace", "create", "--name", "client-suite"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    workspace = re.search(r"workspace: (\S+)", created).group(1)
    live_key = re.search(r"live key: (\S+)", created).group(1)
    test_key = re.search(r"test key: (\S+)", created).group(1)

    children = []
    log = tmp_path / "serve.log"
    with open(log, "w") as out:
        serve = subprocess.Popen([str(BINARY), "serve"], env=env, stdout=out, stderr=out)
    children.append(serve)
    try:
        base = _wait_for_line(log, r"listening on (http://[0-9.:]+)", serve).group(1)
        api = Api(base)
        phones = {}
        for number in (SIM_PHONE, PACED_PHONE):
            data = api.call("POST", "/v1/phones", live_key, {"phone_number": number})["data"]
            phones[number] = (data["id"], data["device_token"])
        paced_id = phones[PACED_PHONE][0]
        api.call(
            "PATCH",
            f"/v1/phones/{paced_id}",
            live_key,
            {"pace": {"per_minute": 1, "per_30_minutes": 1}},
        )
        for number, (phone_id, token) in phones.items():
            sim_log = tmp_path / f"phone-sim-{number}.log"
            with open(sim_log, "w") as out:
                sim = subprocess.Popen(
                    [
                        str(BINARY),
                        "phone-sim",
                        "--server",
                        base,
                        "--token",
                        token,
                        "--deliver-after-ms",
                        "50",
                    ],
                    env=env,
                    stdout=out,
                    stderr=out,
                )
            children.append(sim)
            deadline = time.monotonic() + START_TIMEOUT_S
            while not api.call("GET", f"/v1/phones/{phone_id}", live_key)["data"]["online"]:
                if time.monotonic() > deadline or sim.poll() is not None:
                    raise RuntimeError("phone-sim never came online:\n" + sim_log.read_text())
                time.sleep(0.05)
        # Spend the paced phone's one SMS per 30 minutes.
        primed = api.call(
            "POST",
            "/v1/messages/send",
            live_key,
            {"from_number": PACED_PHONE, "to_number": RECIPIENTS[0], "content": "pace"},
        )["data"]["id"]
        deadline = time.monotonic() + START_TIMEOUT_S
        while api.call("GET", f"/v1/messages/{primed}", live_key)["data"]["status"] == "queued":
            if time.monotonic() > deadline:
                raise RuntimeError("the paced phone never took its first message")
            time.sleep(0.05)
        yield Server(base, workspace, live_key, test_key, api, phones[SIM_PHONE][0], paced_id)
    finally:
        for child in reversed(children):
            child.terminate()
        for child in children:
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()
        tmp.cleanup()


class Receiver:
    """A webhook receiver written the way one for the SMSGate app is: it recomputes
    HMAC-SHA256(signing key, raw body + X-Timestamp) and compares it with X-Signature."""

    def __init__(self):
        self.key = None
        self.lock = threading.Lock()
        self.deliveries = []  # (verified, headers, json body)
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                timestamp = self.headers.get("X-Timestamp", "")
                signature = self.headers.get("X-Signature", "")
                expected = hmac.new(
                    (receiver.key or "").encode(),
                    body + timestamp.encode(),
                    hashlib.sha256,
                ).hexdigest()
                verified = hmac.compare_digest(expected, signature) and (
                    abs(time.time() - int(timestamp or 0)) < 300
                )
                with receiver.lock:
                    receiver.deliveries.append(
                        (verified, {k.lower(): v for k, v in self.headers.items()}, json.loads(body))
                    )
                self.send_response(200 if verified else 401)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/hook"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def wait_for(self, predicate, timeout=15.0):
        """The first delivery whose JSON body satisfies `predicate`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                for delivery in self.deliveries:
                    if predicate(delivery[2]):
                        return delivery
            time.sleep(0.05)
        with self.lock:
            seen = [d[2] for d in self.deliveries]
        raise AssertionError(f"no matching delivery within {timeout} s; got {seen}")


@pytest.fixture(scope="session")
def receiver():
    r = Receiver()
    yield r
    r.httpd.shutdown()


def wait_until(check, timeout=15.0, what="condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout} s")
        time.sleep(0.05)
