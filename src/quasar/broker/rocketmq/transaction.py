"""RocketMQ transactional messages (reference rocketmq-grpc.md §8; proxy ``EndTransactionActivity``,
``TransactionProcessor``; broker ``TransactionalMessageCheckService``).

- **Prepare**: SendMessage of a TRANSACTION message (``send.py`` hands it over) stores a half message
  (``transaction_store.py``: the namespace's ``RMQ_SYS_TRANS_HALF_TOPIC`` with ``REAL_TOPIC``/``REAL_QID``) and
  answers its half-queue offset; transaction id = message id (``UNIQ_KEY``).
- **EndTransaction** (:class:`TransactionActivity`): COMMIT publishes the message to its real queue (where
  Pulsar and RocketMQ consumers then see it), ROLLBACK drops it; both are recorded durably before the answer,
  so a broker restart between send and commit loses nothing and commits once. A blank id answers
  INVALID_TRANSACTION_ID; an id with no unresolved half (unknown, already resolved, given up, or the request
  naming another topic) INTERNAL_SERVER_ERROR, as the proxy answers a missing transaction ("cannot find
  transaction data"); a resolution that is neither COMMIT nor ROLLBACK leaves the half as it is (OK).
- **Checker** (:class:`TransactionService`, one owned task): every ``transaction_check_interval_s`` while
  halves exist (idle otherwise), each half older than ``transaction_timeout_s`` and than its producer's
  ``orphaned_transaction_recovery_duration`` (at most 3600 s, else BAD_REQUEST at send; stored with the half as
  ``CHECK_IMMUNITY_TIME_IN_SECONDS``, so a restart keeps it) is asked about over the
  Telemetry stream of a connected producer of its topic (producer group = topic):
  ``TelemetryCommand{recover_orphaned_transaction_command{message, transaction_id}}``; the producer's
  EndTransaction (source SERVER_CHECK) resolves it. After ``transaction_check_max`` checks the half is moved
  to ``TRANS_CHECK_MAX_TIME_TOPIC`` and logged. Each check re-puts the half with ``TRANSACTION_CHECK_TIMES``
  (``HalfStore.recheck``, as RocketMQ), so the count survives a restart; EndTransaction waits for a re-put in
  progress.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import TYPE_CHECKING, Any, cast

from quasar.broker.auth import PermissionDeniedError
from quasar.broker.rocketmq.context import RocketMQContext, call_metadata
from quasar.broker.rocketmq.mapping import MappedMessage, messages_of_entry
from quasar.broker.rocketmq.status import Code, RocketMQError
from quasar.broker.rocketmq.stubs import definition, service
from quasar.broker.rocketmq.transaction_store import (
    HalfMessage,
    HalfStore,
    ServiceWriter,
    check_immunity_s,
    real_message,
)
from quasar.protocol.errors import ProtocolError

if TYPE_CHECKING:
    from quasar.protocol import TopicName

__all__ = ["MAX_HALF_MESSAGES", "TransactionActivity", "TransactionService"]

log = logging.getLogger(__name__)

MAX_HALF_MESSAGES = 100_000
"""Unresolved half messages a broker holds at most; a TRANSACTION send past it answers TOO_MANY_REQUESTS."""
WRITER_NAME = "rocketmq-transaction"
"""The broker-side producer name that writes half messages and committed ones (topic stats list it)."""


class TransactionService:
    """Half messages of one RocketMQ listener: :meth:`start` recovers the unresolved ones and starts the
    checker, :meth:`stop` ends it; :meth:`prepare` and :meth:`end` serve SendMessage and EndTransaction."""

    def __init__(self, context: RocketMQContext) -> None:
        self.context = context
        self._writer = ServiceWriter(context.service, WRITER_NAME)
        self.store = HalfStore(context.service, self._writer)
        self.halves: dict[str, HalfMessage] = {}
        self._recovered = asyncio.Event()
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ life cycle
    def start(self) -> None:
        """Start the owned task: recovery, then the checker loop."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name="rocketmq-transaction-check"
            )

    async def stop(self) -> None:
        """Cancel the task and detach the broker-side producers."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
        self._writer.close()

    async def _run(self) -> None:
        try:
            for half in await self.store.recover():
                older = self.halves.get(half.transaction_id)
                self.halves[half.transaction_id] = half  # store order: a re-put copy is the later one
                if older is not None:  # a crash between a re-put and its acknowledgement
                    await self.store.resolve(older)
        except Exception:  # a failed recovery must not stop sends and commits of new halves
            log.exception("RocketMQ transactions: recovering half messages failed")
        finally:
            self._recovered.set()
        if self.halves:
            log.info("RocketMQ transactions: %d unresolved half messages recovered", len(self.halves))
        settings = self.context.settings
        while True:
            if not self.halves:
                self._wakeup.clear()
                await self._wakeup.wait()
            await asyncio.sleep(settings.transaction_check_interval_s)
            try:
                await self.check_once()
            except Exception:  # the next round tries again
                log.exception("RocketMQ transaction check failed")

    # ------------------------------------------------------------------ prepare / end
    async def prepare(
        self,
        mapped: MappedMessage,
        real_topic: TopicName,
        queue_id: int,
        client_namespace: str,
        message: Any = None,
    ) -> int:
        """Store a half message for ``real_topic`` queue ``queue_id``; returns its half-queue offset. ``message``
        (the request's ``Message``) gives the immunity time (``check_immunity_s``). Raises RocketMQError
        (BAD_REQUEST for a recovery duration past 3600 s, TOO_MANY_REQUESTS past :data:`MAX_HALF_MESSAGES`,
        the store's errors)."""
        immunity_s = check_immunity_s(message) if message is not None else 0
        if len(self.halves) >= MAX_HALF_MESSAGES:
            raise RocketMQError(Code.TOO_MANY_REQUESTS, f"{MAX_HALF_MESSAGES} transactions are unresolved")
        half, offset = await self.store.prepare(mapped, real_topic, queue_id, client_namespace, immunity_s)
        self.halves[half.transaction_id] = half
        self._wakeup.set()
        return offset

    async def find(self, transaction_id: str, topic_name: str = "") -> HalfMessage:
        """The unresolved half ``transaction_id`` (of RocketMQ topic ``topic_name`` when given), once recovery
        is done. Raises RocketMQError INTERNAL_SERVER_ERROR when there is none."""
        await self._recovered.wait()
        half = self.halves.get(transaction_id)
        if half is None or (topic_name and topic_name != half.producer_group):
            raise RocketMQError(
                Code.INTERNAL_SERVER_ERROR, f"cannot find transaction data of transaction {transaction_id}"
            )
        return half

    async def end(self, transaction_id: str, commit: bool, topic_name: str = "") -> HalfMessage:
        """Commit (publish to the real queue) or roll back the half ``transaction_id`` and record it; returns
        the resolved half. ``topic_name``, when given, must be its RocketMQ topic. Raises RocketMQError
        INTERNAL_SERVER_ERROR for no such unresolved half, the store's errors (the half stays unresolved)."""
        half = await self.find(transaction_id, topic_name)
        while half.rewriting is not None:  # a check's re-put moves it: resolve the copy
            await half.rewriting
        if self.halves.get(transaction_id) is not half:
            half = await self.find(transaction_id, topic_name)
        if half.resolving:
            raise RocketMQError(Code.INTERNAL_SERVER_ERROR, f"transaction {transaction_id} is being resolved")
        half.resolving = True
        try:
            if commit:
                stored = await self.store.entry(half)
                try:
                    message = real_message(stored, transaction_id)
                except ProtocolError as exc:
                    raise RocketMQError(
                        Code.INTERNAL_SERVER_ERROR, f"half message unreadable: {exc}"
                    ) from None
                await self._writer.publish(half.real_topic, message)
            await self.store.resolve(half)
        finally:
            half.resolving = False
        if self.halves.get(transaction_id) is half:
            del self.halves[transaction_id]
        return half

    # ------------------------------------------------------------------ checker
    async def check_once(self, now_ms: int | None = None) -> int:
        """One checker round (module docstring); returns the checks sent."""
        await self._recovered.wait()
        settings = self.context.settings
        now = int(time.time() * 1000) if now_ms is None else now_ms
        timeout_ms = settings.transaction_timeout_s * 1000
        sent = 0
        for half in list(self.halves.values()):
            if half.resolving or half.rewriting or self.halves.get(half.transaction_id) is not half:
                continue
            if now - half.stored_ms < max(timeout_ms, half.immunity_ms):
                continue  # younger than the check timeout, or than the producer's immunity time
            if half.checks >= settings.transaction_check_max:
                await self._give_up(half)
                continue
            half.checks += 1
            try:
                await self.store.recheck(half)
            except RocketMQError as exc:  # asked all the same; the count is kept in memory
                log.warning("RocketMQ transaction %s: re-put failed: %s", half.transaction_id, exc.message)
            if self.halves.get(half.transaction_id) is not half:
                continue  # resolved meanwhile
            if await self._ask(half):
                sent += 1
        return sent

    async def _give_up(self, half: HalfMessage) -> None:
        half.resolving = True
        try:
            await self.store.give_up(half)
        except RocketMQError as exc:
            log.warning("RocketMQ transaction %s: giving up failed: %s", half.transaction_id, exc.message)
            return
        finally:
            half.resolving = False
        self.halves.pop(half.transaction_id, None)
        log.warning(
            "RocketMQ transaction %s on %s unresolved after %d checks: moved to TRANS_CHECK_MAX_TIME_TOPIC",
            half.transaction_id,
            half.real_topic.full_name,
            half.checks,
        )

    def _producers_of(self, half: HalfMessage) -> list[Any]:
        """Connected producers of the half's topic with an open Telemetry stream (same name; same namespace
        when both name one)."""
        namespace = half.client_namespace
        out = []
        for record in self.context.clients.records():
            telemetry = record.telemetry
            if record.client_type != definition.ClientType.PRODUCER or telemetry is None or telemetry.closed:
                continue
            settings = record.settings
            topics = settings.publishing.topics if settings is not None else ()
            for resource in topics:
                theirs = resource.resource_namespace
                if resource.name == half.producer_group and (
                    not theirs or not namespace or theirs == namespace
                ):
                    out.append(record)
                    break
        return out

    async def _ask(self, half: HalfMessage) -> bool:
        """Send the orphaned-transaction question to one producer of the topic; False when none listens."""
        producers = self._producers_of(half)
        if not producers:
            log.debug(
                "RocketMQ transaction %s: no producer of %s to ask", half.transaction_id, half.producer_group
            )
            return False
        try:
            stored = await self.store.entry(half)
            resource = definition.Resource(name=half.producer_group, resource_namespace=half.client_namespace)
            messages = messages_of_entry(
                stored, topic=resource, queue_id=half.queue_id, store_host=self.context.store_host()
            )
        except (RocketMQError, ProtocolError) as exc:
            log.warning("RocketMQ transaction %s: cannot read the half message: %s", half.transaction_id, exc)
            return False
        if not messages:
            return False
        command = service.TelemetryCommand(
            recover_orphaned_transaction_command=service.RecoverOrphanedTransactionCommand(
                message=messages[0], transaction_id=half.transaction_id
            )
        )
        record = random.choice(producers)
        assert record.telemetry is not None
        return bool(await record.telemetry.send(command))


class TransactionActivity:
    """EndTransaction."""

    def __init__(self, context: RocketMQContext) -> None:
        self.context = context

    async def EndTransaction(self, request: Any, context: Any) -> Any:
        """Resolve a transaction (module docstring)."""
        call_metadata(context)
        transaction_id = request.transaction_id.strip()
        if not transaction_id:
            raise RocketMQError(Code.INVALID_TRANSACTION_ID, "transaction id cannot be blank")
        transactions = cast(TransactionService, self.context.transaction_service())
        half = await transactions.find(transaction_id, request.topic.name)
        try:
            self.context.service.security.check_produce(self.context.role(context), half.real_topic)
        except PermissionDeniedError as exc:
            raise RocketMQError(Code.FORBIDDEN, str(exc)) from None
        resolution = request.resolution
        if resolution not in (
            definition.TransactionResolution.COMMIT,
            definition.TransactionResolution.ROLLBACK,
        ):
            log.debug(
                "RocketMQ transaction %s: resolution %d leaves it unresolved", transaction_id, resolution
            )
            return service.EndTransactionResponse()
        commit = resolution == definition.TransactionResolution.COMMIT
        await transactions.end(transaction_id, commit, request.topic.name)
        return service.EndTransactionResponse()
