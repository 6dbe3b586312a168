"""Composition root of a standalone broker: storage, managed ledgers, BrokerService, listeners.

This is the one broker module that imports ``quasar.storage`` (DESIGN.md): it builds the MessageStore and the
metadata store, hands them to the managed-ledger factory, and serves the Pulsar binary protocol and the admin
REST API on one event loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

from aiohttp import web

from quasar.broker.admin import build_admin_app
from quasar.broker.broker_service import BrokerService
from quasar.broker.config import BrokerConfig
from quasar.broker.server_cnx import ServerCnx
from quasar.ledger.config import ManagedLedgerConfig
from quasar.ledger.factory import ManagedLedgerFactory
from quasar.storage.message_store import FlushDiskType, MessageStore, StoreConfig
from quasar.storage.metadata import MetadataStore

log = logging.getLogger(__name__)


class BrokerApp:
    """A running standalone broker. ``start()`` opens storage (recovering it) and binds both listeners;
    ``stop()`` closes connections, persists cursors, flushes and checkpoints the store."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.store: MessageStore | None = None
        self.metadata: MetadataStore | None = None
        self.factory: ManagedLedgerFactory | None = None
        self.service: BrokerService | None = None
        self.connections: set[ServerCnx] = set()
        self._server: asyncio.base_events.Server | None = None
        self._admin_runner: web.AppRunner | None = None
        self.port = 0
        self.admin_port = 0

    @property
    def service_url(self) -> str:
        return f"pulsar://{self.config.host}:{self.port}"

    @property
    def web_service_url(self) -> str:
        return f"http://{self.config.host}:{self.admin_port}"

    async def start(self) -> None:
        config = self.config
        data_dir = Path(config.data_dir)
        data_dir.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        store = MessageStore(
            StoreConfig(
                root_dir=data_dir / "store",
                commit_log_file_size=config.commit_log_file_size,
                flush_disk_type=FlushDiskType[config.flush_disk_type],
                sync_flush_timeout_ms=config.sync_flush_timeout_ms,
                max_message_size=config.max_message_size + 64 * 1024,
            )
        )
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, store.open)
        self.store = store
        await store.start()
        self.metadata = MetadataStore(data_dir / "metadata.db")
        self.factory = ManagedLedgerFactory(
            store,
            self.metadata,
            ManagedLedgerConfig(
                max_entries_per_ledger=config.managed_ledger_max_entries_per_ledger,
                min_ledger_rollover_time_ms=config.managed_ledger_min_ledger_rollover_time_ms,
                cursor_persist_interval_ms=config.managed_ledger_cursor_persist_interval_ms,
            ),
        )
        await self.factory.start()
        service = BrokerService(
            self.factory,
            self.metadata,
            cluster_name=config.cluster_name,
            max_read_batch_size=config.dispatcher_max_read_batch_size,
        )
        service.bootstrap()
        self.service = service
        log.info("storage opened in %.1f ms", (time.monotonic() - started) * 1000)

        self._server = await loop.create_server(
            lambda: ServerCnx(service, config, self.connections), config.host, config.port, reuse_address=True
        )
        self.port = self._server.sockets[0].getsockname()[1]
        service.broker_service_url = self.service_url

        self._admin_runner = web.AppRunner(build_admin_app(service), access_log=None)
        await self._admin_runner.setup()
        site = web.TCPSite(self._admin_runner, config.host, config.admin_port, reuse_address=True)
        await site.start()
        server = site._server
        assert server is not None and server.sockets
        self.admin_port = server.sockets[0].getsockname()[1]
        service.web_service_url = self.web_service_url

    async def stop(self) -> None:
        """Close listeners and connections, persist cursor state, flush and checkpoint storage."""
        if self._server is not None:
            self._server.close()
        for cnx in list(self.connections):
            cnx.close("broker shutting down")
        if self._admin_runner is not None:
            await self._admin_runner.cleanup()
        if self._server is not None:
            await self._server.wait_closed()
        # let in-flight persistence finish so every sent receipt stays true
        await asyncio.sleep(0)
        if self.factory is not None:
            await self.factory.close()
        if self.store is not None:
            await self.store.close()
        if self.metadata is not None:
            self.metadata.close()
