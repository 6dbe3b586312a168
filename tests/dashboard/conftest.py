"""Fixtures of the dashboard tests: one broker process with token authentication and authorization on (a super
user ``admin``, no anonymous role) and traffic from the official client, and one headless Debian chromium
driven by Selenium (chromedriver from chromium-driver), shared by the module's tests.

The browser tests skip, saying why, when ``chromium`` or ``chromedriver`` is not on PATH (``make test`` runs
``scripts/ensure_chromium.sh`` first) or selenium is not installed.
"""

from __future__ import annotations

import functools
import json
import shutil
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from quasar.security.tokens import create_secret_key, create_token
from quasar.testing.broker_process import BrokerProcess

SCREENSHOTS = Path(__file__).resolve().parents[2] / "test-output" / "dashboard"
TENANT_NS = "public/default"
ORDERS = f"persistent://{TENANT_NS}/orders"
PARTED = f"persistent://{TENANT_NS}/parted"
LIVE = f"persistent://{TENANT_NS}/live"
ORDER_KEYS = [f"order-{i % 4}" for i in range(12)]
HTML_BODY = '<img src=x onerror="window.__xss=1"><b>bold</b>'
LIVE_RATE_HZ = 20
LIVE_MAX_S = 60.0
SUPER_USER = "admin"


@dataclass
class Traffic:
    """The broker, the super user's token, and what the official client did (see :func:`traffic`)."""

    broker: BrokerProcess
    secret_key: bytes

    @property
    def admin_url(self) -> str:
        assert self.broker.admin_url is not None
        return self.broker.admin_url

    @functools.cached_property
    def token(self) -> str:
        """The super user's token (one for the module)."""
        return create_token(SUPER_USER, secret_key=self.secret_key, expiry_s=3600)

    def token_for(self, role: str) -> str:
        return (
            self.token
            if role == SUPER_USER
            else create_token(role, secret_key=self.secret_key, expiry_s=3600)
        )

    def post(self, path: str, body: object) -> None:
        with self._open(path, json.dumps(body).encode(), "POST"):
            pass

    def _open(self, path: str, data: bytes | None = None, method: str = "GET") -> Any:
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}
        request = urllib.request.Request(self.admin_url + path, data=data, method=method, headers=headers)
        return urllib.request.urlopen(request, timeout=10)

    def get(self, path: str) -> Any:
        """The JSON answer of an admin GET, as the super user."""
        with self._open(path) as response:
            return json.loads(response.read())

    def raw(self, path: str) -> tuple[dict[str, str], bytes]:
        """(headers, body) of an admin GET, as the super user."""
        with self._open(path) as response:
            return dict(response.headers.items()), response.read()

    def put(self, path: str, body: object) -> None:
        with self._open(path, json.dumps(body).encode(), "PUT"):
            pass


@pytest.fixture(scope="module")
def traffic(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Traffic]:
    """A broker with: ``orders`` (12 keyed messages and one HTML body, subscriptions ``audit`` with a connected
    consumer that acknowledges nothing and ``archive`` with none, the producer kept open), ``parted`` (2
    partitions, 8 keyed messages, subscription ``s`` with a consumer) and ``live``, where a producer thread
    sends LIVE_RATE_HZ messages a second (at most LIVE_MAX_S, stopped at teardown) to a ``tail`` subscription."""
    pulsar = pytest.importorskip("pulsar")
    root = tmp_path_factory.mktemp("dashboard")
    key = create_secret_key()
    (root / "secret.key").write_bytes(key)
    (root / "broker.toml").write_text(
        "authentication_enabled = true\n"
        'authentication_providers = ["token"]\n'
        f'token_secret_key = "file://{root / "secret.key"}"\n'
        "authorization_enabled = true\n"
        f'super_user_roles = ["{SUPER_USER}"]\n'
    )
    broker = BrokerProcess(root / "data", extra_args=("--config", str(root / "broker.toml"))).start()
    client = None
    stop = threading.Event()
    sender: threading.Thread | None = None
    try:
        assert broker.service_url is not None and broker.admin_url is not None
        result = Traffic(broker, key)
        client = pulsar.Client(
            broker.service_url,
            operation_timeout_seconds=10,
            authentication=pulsar.AuthenticationToken(result.token),
            logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
        )
        result.put(f"/admin/v2/persistent/{TENANT_NS}/parted/partitions", 2)
        audit = client.subscribe(ORDERS, "audit", consumer_name="audit-reader")
        client.subscribe(ORDERS, "archive").close()  # a durable subscription without consumers
        orders = client.create_producer(ORDERS, producer_name="orders-producer", batching_enabled=False)
        for i, order_key in enumerate(ORDER_KEYS):
            orders.send(
                f"order {i} for {order_key}".encode(), partition_key=order_key, properties={"n": str(i)}
            )
        orders.send(HTML_BODY.encode(), partition_key="html")
        parted_consumer = client.subscribe(PARTED, "s", consumer_name="parted-reader")
        parted = client.create_producer(PARTED, producer_name="parted-producer", batching_enabled=False)
        for i in range(8):
            parted.send(f"parted {i}".encode(), partition_key=f"p{i}")
        live_consumer = client.subscribe(LIVE, "tail", consumer_name="live-reader")
        live = client.create_producer(LIVE, producer_name="live-producer", batching_enabled=False)

        def send_steadily() -> None:
            deadline = time.monotonic() + LIVE_MAX_S
            count = 0
            while not stop.is_set() and time.monotonic() < deadline:
                live.send_async(f"live {count}".encode(), None)
                count += 1
                stop.wait(1 / LIVE_RATE_HZ)

        sender = threading.Thread(target=send_steadily, name="live-producer", daemon=True)
        sender.start()
        yield result
        del audit, parted_consumer, live_consumer
    finally:
        stop.set()
        if sender is not None:
            sender.join(timeout=10)
        if client is not None:
            client.close()
        broker.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless chromium session for the module's pages (skips when chromium/chromedriver is missing)."""
    webdriver = pytest.importorskip("selenium.webdriver")
    chromium = shutil.which("chromium")
    chromedriver = shutil.which("chromedriver")
    if chromium is None or chromedriver is None:
        pytest.skip(
            "Debian's chromium and chromium-driver are needed (scripts/ensure_chromium.sh installs them)"
        )
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in (
        "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
        "--window-size=1280,1100", "--no-first-run", "--disable-extensions", "--disable-background-networking",
    ):  # fmt: skip
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(executable_path=chromedriver), options=options)
    driver.set_page_load_timeout(20)
    driver.set_script_timeout(10)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    try:
        yield driver
    finally:
        driver.quit()
