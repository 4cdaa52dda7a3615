"""Fixtures of the portal's browser tests: one `smsgw serve` on a free loopback port with a
temporary SQLite file (and `portal.default_country = "US"`), and a fresh headless Chromium per
test, driven through Debian's /usr/bin/chromedriver (selenium-manager never runs, so nothing is
downloaded). Every request of a test goes to 127.0.0.1."""

import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

BIN = os.environ.get("SMSGW_BIN", "target/debug/smsgw")
CHROMEDRIVER = "/usr/bin/chromedriver"
CHROMIUM = "/usr/bin/chromium"
# Lists refresh this often in the tests (the page's `?refresh_ms=`), instead of 15 s.
REFRESH_MS = 400


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(check, timeout=10.0, interval=0.1, what="condition"):
    """Polls `check` until it returns a truthy value (returned) or the deadline passes."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except Exception as err:  # a stale element while the page redraws
            last = err
        if last and not isinstance(last, Exception):
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


class Server:
    def __init__(self, base, live_key, test_key, proc, workdir):
        self.base = base
        self.live_key = live_key
        self.test_key = test_key
        self.proc = proc
        self.workdir = workdir

    def api(self, method, path, key, body=None, query=None):
        """One /v1 call: (HTTP status, envelope)."""
        url = self.base + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("x-api-key", key)
        if data is not None:
            request.add_header("content-type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read() or b"{}")


@pytest.fixture(scope="session")
def server():
    workdir = tempfile.mkdtemp(prefix="smsgw-browser-")
    port = free_port()
    env = dict(
        os.environ,
        SMSGW_SERVER__BIND=f"127.0.0.1:{port}",
        SMSGW_DATABASE__URL=f"sqlite://{workdir}/smsgw.db?mode=rwc",
        SMSGW_PORTAL__DEFAULT_COUNTRY="US",
        SMSGW_LOG__LEVEL="warn",
    )
    env.pop("SMSGW_TEST_DATABASE_URL", None)
    stderr = open(os.path.join(workdir, "server.log"), "wb")
    proc = subprocess.Popen(
        [BIN, "serve"], env=env, stdout=subprocess.PIPE, stderr=stderr, cwd=workdir, text=True
    )
    keys = {}
    ready = threading.Event()

    def read():
        for line in proc.stdout:
            for name in ("live", "test"):
                if line.startswith(f"{name} key: "):
                    keys[name] = line.split(": ", 1)[1].strip()
            if line.startswith("listening on"):
                ready.set()

    threading.Thread(target=read, daemon=True).start()
    deadline = time.monotonic() + 60
    while not ready.wait(0.1) and proc.poll() is None and time.monotonic() < deadline:
        pass
    if not ready.is_set() or "live" not in keys or "test" not in keys:
        proc.kill()
        log = open(os.path.join(workdir, "server.log"), errors="replace").read()
        raise RuntimeError(f"smsgw serve did not start: {log[-3000:]}")
    yield Server(f"http://127.0.0.1:{port}", keys["live"], keys["test"], proc, workdir)
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
    stderr.close()
    shutil.rmtree(workdir, ignore_errors=True)


def chromium_options(profile):
    options = Options()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-default-apps",
        "--disable-extensions",
        "--window-size=1280,900",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return options


@pytest.fixture
def browser():
    profile = tempfile.mkdtemp(prefix="smsgw-chromium-")
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=chromium_options(profile))
    driver.implicitly_wait(0)
    driver.console = []  # every browser log entry read so far
    yield driver
    # Every test ends without a script error in its console.
    try:
        errors = script_errors(driver)
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
    assert not errors, f"script errors in the console: {errors}"



def console(driver):
    """The browser log entries since the last call, kept in `driver.console` too."""
    entries = driver.get_log("browser")
    driver.console.extend(entries)
    return entries


def script_errors(driver):
    """Console errors that are not a refused HTTP request (which the page shows itself)."""
    console(driver)
    return [e for e in driver.console if e["level"] == "SEVERE" and e.get("source") != "network"]


def sign_in(driver, server, key, remember=False, page="home"):
    driver.get(f"{server.base}/portal/?refresh_ms={REFRESH_MS}#{page}")
    form = wait_for(lambda: visible(driver, "#key-form"), what="the sign-in form")
    form.find_element(By.ID, "api-key").send_keys(key)
    if remember:
        form.find_element(By.ID, "key-remember").click()
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait_for(lambda: visible(driver, "#workspace"), what="signed in")


def visible(driver, selector):
    """The first element matching `selector` when it is displayed, else None."""
    for element in driver.find_elements(By.CSS_SELECTOR, selector):
        if element.is_displayed():
            return element
    return None


def click(driver, selector, xpath=None):
    """Clicks the element, again if a refresh redrew it between finding and clicking."""

    def attempt():
        element = driver.find_element(By.CSS_SELECTOR, selector)
        if xpath:
            element = element.find_element(By.XPATH, xpath)
        element.click()
        return True

    return wait_for(attempt, what=f"a click on {selector}")


def go(driver, section):
    driver.find_element(By.CSS_SELECTOR, f'nav a[href="#{section}"]').click()
    wait_for(lambda: visible(driver, f"#{section}"), what=f"section {section}")
    return driver.find_element(By.ID, section)
