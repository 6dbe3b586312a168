"""A replicated broker group of real processes for the failover tests: etcd, one master and N slaves of one
broker group (``quasar broker --broker-role ...``), with fast HA settings and a short etcd session TTL."""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from quasar.testing.broker_process import BrokerProcess
from quasar.testing.etcd import EtcdProcess

GROUP = "g"

FAST_SETTINGS = """
ha_send_heartbeat_interval_s = 0.5
ha_housekeeping_interval_s = 3.0
ha_max_time_slave_not_catchup_s = 3.0
slave_timeout_s = 2.0
managed_ledger_cursor_persist_interval_ms = 200
commit_log_file_size = 262144
"""
"""Seconds-scale HA settings; 256 KiB commit-log segments so runs roll segments."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def http(method: str, url: str) -> tuple[int, Any]:
    """(status, JSON body or None); (0, reason) when nothing answers."""
    request = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            body = response.read()
            return response.status, json.loads(body) if body else None
    except urllib.error.HTTPError as exc:
        if exc.code == 307 and exc.headers.get("Location"):  # urllib does not follow a POST's 307
            return http(method, exc.headers["Location"])
        body = exc.read()
        try:
            return exc.code, json.loads(body) if body else None
        except ValueError:
            return exc.code, body.decode(errors="replace")
    except (urllib.error.URLError, OSError) as exc:
        return 0, str(exc)


def wait_until(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout_s} s: {what}")


class ReplicatedGroup:
    """etcd + ``1 + slaves`` brokers of group ``g``; :attr:`url` lists every broker for the client."""

    def __init__(
        self,
        root: Path,
        *,
        slaves: int,
        master_role: str = "SYNC_MASTER",
        settings: str = FAST_SETTINGS,
        master_settings: str = "",
        master_ha_port: int = 0,
    ) -> None:
        self.root = root
        self.etcd = EtcdProcess(root / "etcd")
        self.brokers: list[BrokerProcess] = []
        self._spec = [(0, master_role, master_settings, master_ha_port)] + [
            (i, "SLAVE", "", 0) for i in range(1, slaves + 1)
        ]
        self._settings = settings

    def start(self) -> ReplicatedGroup:
        self.etcd.start()
        try:
            for broker_id, role, extra, ha_port in self._spec:
                config = self.root / f"b{broker_id}.toml"
                config.write_text(self._settings + extra)
                broker = BrokerProcess(
                    self.root / f"b{broker_id}",
                    subcommand="broker",
                    extra_args=(
                        "--broker-name", GROUP, "--broker-id", str(broker_id), "--broker-role", role,
                        "--ha-port", str(ha_port), "--config", str(config),
                        "--metadata-store", f"{self.etcd.url}?session_ttl_s=2&operation_timeout_s=3",
                    ),
                )  # fmt: skip
                self.brokers.append(broker.start())
                if broker_id == 0:  # the master bootstraps the group before the slaves join
                    wait_until(lambda: self.master_index() == 0, 20, "the first master elected")
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for broker in reversed(self.brokers):
            broker.stop()
        self.etcd.stop()

    @property
    def url(self) -> str:
        hosts = [str(b.service_url).split("://", 1)[1] for b in self.brokers]
        return "pulsar://" + ",".join(hosts)

    def live(self) -> list[BrokerProcess]:
        return [b for b in self.brokers if b.running]

    def replication(self, index: int) -> dict[str, Any]:
        code, body = http("GET", f"{self.brokers[index].admin_url}/admin/v2/replication")
        return body if code == 200 and isinstance(body, dict) else {}

    def master_index(self) -> int | None:
        """The broker that reports itself master with the highest epoch, or None."""
        best: tuple[int, int] | None = None
        for index, broker in enumerate(self.brokers):
            if not broker.running:
                continue
            status = self.replication(index)
            if status.get("role") == "master" and (best is None or status["epoch"] > best[1]):
                best = (index, status["epoch"])
        return None if best is None else best[0]

    def wait_master(self, *, other_than: int | None = None, timeout_s: float = 30.0) -> int:
        found: list[int] = []

        def elected() -> bool:
            index = self.master_index()
            if index is None or index == other_than:
                return False
            found.append(index)
            return True

        wait_until(elected, timeout_s, "a master elected")
        return found[-1]

    def wait_in_sync(self, master: int, members: int, timeout_s: float = 30.0) -> None:
        """Until the master's sync-state set has ``members`` brokers (itself included)."""
        wait_until(
            lambda: len(self.replication(master).get("syncStateSet", [])) >= members,
            timeout_s,
            f"{members} brokers in the sync-state set",
        )

    def commit_log_bytes(self, index: int, end: int) -> bytes:
        """The concatenated commit-log bytes ``[0, end)`` of broker ``index`` (files named by start offset)."""
        chunks = []
        for path in sorted((self.root / f"b{index}" / "store" / "commitlog").iterdir()):
            start = int(path.name)
            if start >= end:
                break
            with path.open("rb") as file:
                chunks.append(file.read(end - start))
        return b"".join(chunks)
