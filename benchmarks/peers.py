#!/usr/bin/env python3
"""peers.py - reference-point ("peer") benchmarks for durable message brokers.

The same three workloads are run against every peer:

  pub   publish N messages of S bytes, client-side batching/pipelining as the
        client allows, and wait for every durable acknowledgement -> msg/s, MB/s
  cons  read and acknowledge those N messages (backlog drain)    -> msg/s, MB/s
  lat   end-to-end latency at a fixed rate (default 5,000 msg/s for 10 s):
        the producer writes its timestamps into the payload, a consumer in
        another process records receive - send into an HdrHistogram
        -> p50 / p99 / p99.9 / max

Peers (see PEERS below): NATS JetStream, Redis Streams (AOF everysec/always),
RabbitMQ classic durable queue + publisher confirms, RabbitMQ Stream, and
"pulsar" - any broker speaking the Pulsar binary protocol, driven by the
official pulsar-client package (no server is started for it; pass --pulsar-url).

Every measurement runs in a fresh worker subprocess (python peers.py _worker
...), so producer, consumer and orchestrator never share a GIL.  Servers are
started by this script on 127.0.0.1 with a data dir under the temp directory and are stopped
by the PID this script started (never by name).

Usage: see peers-README.md next to this file.
"""
from __future__ import annotations

import argparse
import asyncio
import datetime as _dt
import json
import os
import tempfile
import platform
import random
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "results", "peers.jsonl")
TMP_BASE = os.path.join(tempfile.gettempdir(), "peers")
HOST = "127.0.0.1"

mono_ns = time.monotonic_ns  # CLOCK_MONOTONIC is system-wide: comparable across processes
LAT_HDR = struct.Struct("<qqq")  # seq, intended send time (ns), actual send time (ns)


def payload_fixed(size: int) -> bytes:
    rnd = random.Random(size)
    return bytes(rnd.getrandbits(8) for _ in range(size))


def lat_payload(seq: int, intended: int, pad: bytes) -> bytes:
    return LAT_HDR.pack(seq, intended, mono_ns()) + pad


def install_uvloop() -> str:
    if os.environ.get("PEERS_NO_UVLOOP") == "1":  # e.g. a client that cannot run on uvloop
        return "asyncio"
    try:
        import uvloop  # type: ignore

        uvloop.install()
        return "uvloop"
    except Exception:  # pragma: no cover
        return "asyncio"


# --------------------------------------------------------------------------
# latency helpers (consumer side)
# --------------------------------------------------------------------------
class LatRecorder:
    """Records (receive - send) and (receive - intended) in microseconds."""

    def __init__(self, expected: int):
        from hdrh.histogram import HdrHistogram

        self.expected = expected
        self.h_send = HdrHistogram(1, 120_000_000, 3)
        self.h_sched = HdrHistogram(1, 120_000_000, 3)
        self.count = 0
        self.seqs_max = -1
        self.done = asyncio.Event() if _in_loop() else None

    def record(self, data: bytes, now: int | None = None) -> None:
        if now is None:
            now = mono_ns()
        seq, intended, sent = LAT_HDR.unpack_from(data, 0)
        self.h_send.record_value(max(1, (now - sent) // 1000))
        self.h_sched.record_value(max(1, (now - intended) // 1000))
        self.count += 1
        if seq > self.seqs_max:
            self.seqs_max = seq
        if self.count >= self.expected and self.done is not None:
            self.done.set()

    def result(self) -> dict:
        def pct(h):
            if h.get_total_count() == 0:
                return {}
            return {
                "p50_us": h.get_value_at_percentile(50),
                "p90_us": h.get_value_at_percentile(90),
                "p99_us": h.get_value_at_percentile(99),
                "p999_us": h.get_value_at_percentile(99.9),
                "max_us": h.get_max_value(),
                "mean_us": round(h.get_mean_value(), 1),
            }

        return {"received": self.count, "lat_send": pct(self.h_send), "lat_sched": pct(self.h_sched)}


def _in_loop() -> bool:
    try:
        asyncio.get_running_loop()
        return True
    except RuntimeError:
        return False


async def paced_async(rate: float, duration: float, size: int, send, tick: float = 0.001):
    """Call `await send(list_of_payloads)` for the messages that are due, at `rate` msg/s.

    The producer wakes at most once per `tick` seconds and hands over everything that is
    due (each payload stamped with its own send time).  Without the floor an event loop
    with millisecond timers (uvloop rounds 0.2 ms to 0) spins and makes one batch per
    message, which is a different workload for clients with explicit batch APIs."""
    total = int(rate * duration)
    interval = 1e9 / rate
    pad = b"p" * max(0, size - LAT_HDR.size)
    start = mono_ns() + 20_000_000
    i = 0
    max_lag = 0
    while i < total:
        now = mono_ns()
        due = min(total, int((now - start) / interval) + 1) if now >= start else 0
        if due > i:
            batch = []
            max_lag = max(max_lag, now - (start + int(i * interval)))  # lateness of the oldest due message
            while i < due:
                intended = start + int(i * interval)
                batch.append(lat_payload(i, intended, pad))
                i += 1
            await send(batch)
        nxt = start + int(i * interval)
        delay = (nxt - mono_ns()) / 1e9
        await asyncio.sleep(max(delay, tick))
        if mono_ns() - start > (duration + 60) * 1e9:  # hard bound
            break
    return {"sent": i, "max_sched_lag_ms": round(max_lag / 1e6, 2),
            "elapsed_s": round((mono_ns() - start) / 1e9, 3)}


# --------------------------------------------------------------------------
# Peer adapters.  Each adapter implements (all run inside a worker process):
#   setup(target, size) / teardown(target)
#   pub(target, n, size)           -> {"elapsed_s": .., "acked": ..}
#   cons(target, n)                -> {"elapsed_s": .., "received": ..}
#   lat_cons(target, expected, ready_cb, timeout) -> LatRecorder.result()
#   lat_pub(target, rate, duration, size)
# --------------------------------------------------------------------------
class Peer:
    name = "?"
    client = "?"
    durability = "?"
    needs_server = True

    def __init__(self, opts: dict):
        self.opts = opts

    # server side -----------------------------------------------------------
    def server_cmd(self, datadir: str) -> list[dict]:
        raise NotImplementedError

    def ports(self) -> list[int]:
        return []

    def server_version(self) -> str:
        return "?"


# ---- NATS JetStream --------------------------------------------------------
class NatsPeer(Peer):
    client = "nats-py (asyncio+uvloop)"

    def __init__(self, opts, name, binary, sync_interval=None, durability=""):
        super().__init__(opts)
        self.name = name
        self.binary = binary
        self.sync_interval = sync_interval
        self.durability = durability
        self.url = opts.get("nats_url") or f"nats://{HOST}:4222"

    def ports(self):
        return [4222]

    def server_version(self):
        try:
            return subprocess.run([self.binary, "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
        except Exception as e:  # pragma: no cover
            return f"? ({e})"

    def server_cmd(self, datadir):
        if self.sync_interval is None:
            argv = [self.binary, "-a", HOST, "-p", "4222", "-js", "-sd", os.path.join(datadir, "js")]
        else:
            conf = os.path.join(datadir, "nats.conf")
            with open(conf, "w") as f:
                f.write(f'listen: "{HOST}:4222"\n')
                f.write(f'jetstream {{ store_dir: "{os.path.join(datadir, "js")}", sync_interval: {self.sync_interval} }}\n')
            argv = [self.binary, "-c", conf]
        return [{"name": "nats-server", "argv": argv, "ready_port": 4222}]

    async def _connect(self):
        import nats

        last = None
        for _ in range(50):
            try:
                nc = await nats.connect(self.url, max_reconnect_attempts=0, pending_size=8 * 1024 * 1024)
                js = nc.jetstream(timeout=30, publish_async_max_pending=self.opts.get("window", 4000))
                await js.account_info()
                return nc, js
            except Exception as e:  # server still starting
                last = e
                await asyncio.sleep(0.2)
        raise RuntimeError(f"cannot connect to NATS: {last!r}")

    async def setup(self, target, size):
        from nats.js.api import StorageType, StreamConfig

        nc, js = await self._connect()
        try:
            await js.delete_stream(target)
        except Exception:
            pass
        await js.add_stream(StreamConfig(name=target, subjects=[target], storage=StorageType.FILE, num_replicas=1))
        await nc.close()

    async def teardown(self, target):
        nc, js = await self._connect()
        try:
            await js.delete_stream(target)
        except Exception:
            pass
        await nc.close()

    async def pub(self, target, n, size):
        nc, js = await self._connect()
        data = payload_fixed(size)
        futs = []
        t0 = mono_ns()
        for _ in range(n):
            futs.append(await js.publish_async(target, data))
        results = await asyncio.wait_for(asyncio.gather(*futs, return_exceptions=True), 600)
        t1 = mono_ns()
        errors = sum(1 for r in results if isinstance(r, BaseException))
        last_seq = max((r.seq for r in results if not isinstance(r, BaseException)), default=0)
        await nc.close()
        return {"elapsed_s": (t1 - t0) / 1e9, "acked": n - errors, "errors": errors, "last_seq": last_seq}

    async def cons(self, target, n):
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

        nc, js = await self._connect()
        batch = self.opts.get("fetch_batch", 1000)
        psub = await js.pull_subscribe(
            target, durable="bench", stream=target,
            config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, deliver_policy=DeliverPolicy.ALL,
                                  max_ack_pending=-1, max_waiting=16),
        )
        got = 0
        nbytes = 0
        t0 = mono_ns()
        deadline = time.monotonic() + 600
        while got < n and time.monotonic() < deadline:
            try:
                msgs = await psub.fetch(batch=min(batch, n - got), timeout=5)
            except asyncio.TimeoutError:
                continue
            for m in msgs:
                nbytes += len(m.data)
                await m.ack()  # explicit per-message ack (fire-and-forget publish)
            got += len(msgs)
        await nc.flush()
        t1 = mono_ns()
        await nc.close()
        return {"elapsed_s": (t1 - t0) / 1e9, "received": got, "bytes": nbytes}

    async def lat_cons(self, target, expected, ready, timeout):
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

        nc, js = await self._connect()
        rec = LatRecorder(expected)
        rec.done = asyncio.Event()

        async def cb(msg):
            rec.record(msg.data)
            await msg.ack()

        sub = await js.subscribe(
            target, cb=cb, manual_ack=True, stream=target,
            config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, deliver_policy=DeliverPolicy.NEW,
                                  max_ack_pending=-1),
            pending_msgs_limit=1_000_000,
        )
        await nc.flush()
        ready()
        try:
            await asyncio.wait_for(rec.done.wait(), timeout)
        except asyncio.TimeoutError:
            pass
        await nc.flush()
        try:
            await sub.unsubscribe()
        except Exception:
            pass
        await nc.close()
        return rec.result()

    async def lat_pub(self, target, rate, duration, size):
        nc, js = await self._connect()
        futs = []

        async def send(batch):
            for p in batch:
                futs.append(await js.publish_async(target, p))

        r = await paced_async(rate, duration, size, send, self.opts.get("tick_ms", 1.0) / 1000)
        res = await asyncio.wait_for(asyncio.gather(*futs, return_exceptions=True), 120)
        r["errors"] = sum(1 for x in res if isinstance(x, BaseException))
        await nc.close()
        return r


# ---- Redis Streams ---------------------------------------------------------
class RedisPeer(Peer):
    client = "redis-py + hiredis (sync pipeline; asyncio for lat)"

    def __init__(self, opts, name, appendfsync):
        super().__init__(opts)
        self.name = name
        self.appendfsync = appendfsync
        self.durability = f"AOF appendonly yes, appendfsync {appendfsync}, RDB off"
        self.port = 6379

    def ports(self):
        return [self.port]

    def server_version(self):
        return subprocess.run(["redis-server", "--version"], capture_output=True, text=True, timeout=10).stdout.strip()

    def server_cmd(self, datadir):
        argv = ["redis-server", "--bind", HOST, "--port", str(self.port), "--dir", datadir,
                "--appendonly", "yes", "--appendfsync", self.appendfsync, "--save", "",
                "--protected-mode", "yes", "--daemonize", "no",
                "--logfile", os.path.join(datadir, "redis.log")]
        return [{"name": "redis-server", "argv": argv, "ready_port": self.port}]

    def _r(self):
        import redis

        r = redis.Redis(host=HOST, port=self.port)
        for _ in range(50):
            try:
                r.ping()
                return r
            except Exception:
                time.sleep(0.2)
        r.ping()
        return r

    async def setup(self, target, size):
        r = self._r()
        r.delete(target)
        r.xgroup_create(target, "g", id="0", mkstream=True)
        r.close()

    async def teardown(self, target):
        r = self._r()
        r.delete(target)
        r.close()

    async def pub(self, target, n, size):
        r = self._r()
        data = payload_fixed(size)
        batch = self.opts.get("batch", 1000)
        acked = 0
        t0 = mono_ns()
        sent = 0
        while sent < n:
            k = min(batch, n - sent)
            p = r.pipeline(transaction=False)
            for _ in range(k):
                p.xadd(target, {"d": data})
            res = p.execute()  # replies come after the AOF write (and fsync with 'always')
            acked += sum(1 for x in res if x)
            sent += k
        t1 = mono_ns()
        r.close()
        return {"elapsed_s": (t1 - t0) / 1e9, "acked": acked}

    async def cons(self, target, n):
        r = self._r()
        batch = self.opts.get("batch", 1000)
        got = 0
        nbytes = 0
        pending_ack: list = []
        t0 = mono_ns()
        deadline = time.monotonic() + 600
        while got < n and time.monotonic() < deadline:
            p = r.pipeline(transaction=False)
            if pending_ack:
                p.xack(target, "g", *pending_ack)
            p.xreadgroup("g", "c1", {target: ">"}, count=batch)
            res = p.execute()
            rd = res[-1]
            pending_ack = []
            if rd:
                for _stream, entries in rd:
                    for mid, fields in entries:
                        pending_ack.append(mid)
                        nbytes += len(fields[b"d"])
                got += len(pending_ack)
        if pending_ack:
            r.xack(target, "g", *pending_ack)
        t1 = mono_ns()
        r.close()
        return {"elapsed_s": (t1 - t0) / 1e9, "received": got, "bytes": nbytes}

    async def lat_cons(self, target, expected, ready, timeout):
        r = self._r()
        rec = LatRecorder(expected)
        pending_ack: list = []
        ready()
        deadline = time.monotonic() + timeout
        while rec.count < expected and time.monotonic() < deadline:
            p = r.pipeline(transaction=False)
            if pending_ack:
                p.xack(target, "g", *pending_ack)
            p.xreadgroup("g", "c1", {target: ">"}, count=1000, block=200)
            res = p.execute()
            rd = res[-1]
            now = mono_ns()
            pending_ack = []
            if rd:
                for _stream, entries in rd:
                    for mid, fields in entries:
                        rec.record(fields[b"d"], now)
                        pending_ack.append(mid)
        if pending_ack:
            r.xack(target, "g", *pending_ack)
        r.close()
        return rec.result()

    async def lat_pub(self, target, rate, duration, size):
        import redis.asyncio as aredis

        r = aredis.Redis(host=HOST, port=self.port, max_connections=256)
        tasks = set()
        errors = [0]

        async def one(batch):
            try:
                async with r.pipeline(transaction=False) as p:
                    for m in batch:
                        p.xadd(target, {"d": m})
                    await p.execute()
            except Exception:
                errors[0] += len(batch)

        async def send(batch):
            t = asyncio.get_running_loop().create_task(one(batch))
            tasks.add(t)
            t.add_done_callback(tasks.discard)

        res = await paced_async(rate, duration, size, send, self.opts.get("tick_ms", 1.0) / 1000)
        if tasks:
            await asyncio.wait_for(asyncio.gather(*list(tasks)), 120)
        res["errors"] = errors[0]
        await r.aclose()
        return res


# ---- RabbitMQ (shared server) ----------------------------------------------
class RabbitServerMixin:
    def ports(self):
        return [4369, 5672, 5552, 25672]

    def server_version(self):
        try:
            out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "rabbitmq-server"], capture_output=True,
                                 text=True, timeout=10).stdout
            erl = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "erlang-base"], capture_output=True,
                                 text=True, timeout=10).stdout
            return f"rabbitmq-server {out} (erlang {erl})"
        except Exception as e:  # pragma: no cover
            return f"? ({e})"

    def server_cmd(self, datadir):
        home = os.path.join(datadir, "home")
        for d in (home, os.path.join(datadir, "mnesia"), os.path.join(datadir, "log")):
            os.makedirs(d, exist_ok=True)
        conf = os.path.join(datadir, "rabbitmq.conf")
        with open(conf, "w") as f:
            f.write(f"listeners.tcp.default = {HOST}:5672\n")
            f.write(f"stream.listeners.tcp.default = {HOST}:5552\n")
            f.write(f"stream.advertised_host = {HOST}\n")
            f.write("log.console = false\nlog.file.level = warning\n")
        with open(os.path.join(datadir, "enabled_plugins"), "w") as f:
            f.write("[rabbitmq_stream].\n")
        open(os.path.join(datadir, "rabbitmq-env.conf"), "w").close()
        env = {
            "HOME": home,
            "RABBITMQ_NODENAME": "peers@localhost",
            "RABBITMQ_NODE_IP_ADDRESS": HOST,
            "RABBITMQ_NODE_PORT": "5672",
            "RABBITMQ_DIST_PORT": "25672",
            "RABBITMQ_MNESIA_BASE": os.path.join(datadir, "mnesia"),
            "RABBITMQ_LOG_BASE": os.path.join(datadir, "log"),
            "RABBITMQ_CONFIG_FILE": conf,
            "RABBITMQ_ENABLED_PLUGINS_FILE": os.path.join(datadir, "enabled_plugins"),
            "RABBITMQ_PID_FILE": os.path.join(datadir, "rabbit.pid"),
            "RABBITMQ_CONF_ENV_FILE": os.path.join(datadir, "rabbitmq-env.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": os.path.join(datadir, "advanced.config"),
            "ERL_EPMD_ADDRESS": HOST,
            "ERL_EPMD_PORT": "4369",
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
        }
        return [
            {"name": "epmd", "argv": ["epmd", "-address", HOST, "-port", "4369"], "ready_port": 4369},
            {"name": "rabbitmq-server", "argv": ["/usr/lib/rabbitmq/bin/rabbitmq-server"], "env": env,
             "ready_port": 5552, "ready_timeout": 180,
             "pidfile": os.path.join(datadir, "rabbit.pid")},
        ]


class RabbitClassicAioPeer(RabbitServerMixin, Peer):
    """Same workload with aio-pika.  Kept for reference: in a trial it was ~3x slower
    (client-bound) than pika's SelectConnection, which `rabbitmq-classic` uses."""
    name = "rabbitmq-classic-aiopika"
    client = "aio-pika (asyncio+uvloop), confirms, sliding window"
    durability = "durable classic queue, persistent msgs, publisher confirms (confirm after fsync)"
    url = f"amqp://guest:guest@{HOST}:5672/"

    async def _connect(self):
        import aio_pika

        last = None
        for _ in range(100):
            try:
                return await aio_pika.connect(self.url)
            except Exception as e:
                last = e
                await asyncio.sleep(0.3)
        raise RuntimeError(f"cannot connect to RabbitMQ: {last!r}")

    async def setup(self, target, size):
        conn = await self._connect()
        ch = await conn.channel()
        await ch.queue_delete(target)
        await ch.declare_queue(target, durable=True, arguments={"x-queue-type": "classic"})
        await conn.close()

    async def teardown(self, target):
        conn = await self._connect()
        ch = await conn.channel()
        await ch.queue_delete(target)
        await conn.close()

    async def pub(self, target, n, size):
        import aio_pika

        conn = await self._connect()
        ch = await conn.channel(publisher_confirms=True)
        ex = ch.default_exchange
        data = payload_fixed(size)
        window = self.opts.get("window", 2000)
        sem = asyncio.Semaphore(window)
        errors = [0]
        loop = asyncio.get_running_loop()
        tasks = set()

        async def one():
            try:
                await ex.publish(aio_pika.Message(data, delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                                 routing_key=target)
            except Exception:
                errors[0] += 1
            finally:
                sem.release()

        t0 = mono_ns()
        for _ in range(n):
            await sem.acquire()
            t = loop.create_task(one())
            tasks.add(t)
            t.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.wait_for(asyncio.gather(*list(tasks)), 600)
        t1 = mono_ns()
        await conn.close()
        return {"elapsed_s": (t1 - t0) / 1e9, "acked": n - errors[0], "errors": errors[0]}

    async def cons(self, target, n):
        conn = await self._connect()
        ch = await conn.channel()
        prefetch = self.opts.get("prefetch", 2000)
        ack_every = self.opts.get("ack_every", 500)
        await ch.set_qos(prefetch_count=prefetch)
        q = await ch.declare_queue(target, durable=True, arguments={"x-queue-type": "classic"})
        st = {"got": 0, "bytes": 0}
        done = asyncio.Event()

        async def cb(msg):
            st["got"] += 1
            st["bytes"] += len(msg.body)
            if st["got"] % ack_every == 0 or st["got"] >= n:
                await msg.ack(multiple=True)
            if st["got"] >= n:
                done.set()

        t0 = mono_ns()
        tag = await q.consume(cb, no_ack=False)
        try:
            await asyncio.wait_for(done.wait(), 600)
        except asyncio.TimeoutError:
            pass
        t1 = mono_ns()
        await q.cancel(tag)
        await conn.close()
        return {"elapsed_s": (t1 - t0) / 1e9, "received": st["got"], "bytes": st["bytes"]}

    async def lat_cons(self, target, expected, ready, timeout):
        conn = await self._connect()
        ch = await conn.channel()
        await ch.set_qos(prefetch_count=2000)
        q = await ch.declare_queue(target, durable=True, arguments={"x-queue-type": "classic"})
        rec = LatRecorder(expected)
        rec.done = asyncio.Event()

        async def cb(msg):
            rec.record(msg.body)
            if rec.count % 50 == 0 or rec.count >= expected:
                await msg.ack(multiple=True)

        tag = await q.consume(cb, no_ack=False)
        ready()
        try:
            await asyncio.wait_for(rec.done.wait(), timeout)
        except asyncio.TimeoutError:
            pass
        await q.cancel(tag)
        await conn.close()
        return rec.result()

    async def lat_pub(self, target, rate, duration, size):
        import aio_pika

        conn = await self._connect()
        ch = await conn.channel(publisher_confirms=True)
        ex = ch.default_exchange
        loop = asyncio.get_running_loop()
        tasks = set()
        errors = [0]

        async def one(p):
            try:
                await ex.publish(aio_pika.Message(p, delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                                 routing_key=target)
            except Exception:
                errors[0] += 1

        async def send(batch):
            for p in batch:
                t = loop.create_task(one(p))
                tasks.add(t)
                t.add_done_callback(tasks.discard)

        r = await paced_async(rate, duration, size, send, self.opts.get("tick_ms", 1.0) / 1000)
        if tasks:
            await asyncio.wait_for(asyncio.gather(*list(tasks)), 120)
        r["errors"] = errors[0]
        await conn.close()
        return r


class _Confirms:
    """Publisher-confirm bookkeeping for pika (delivery tags are 1..n, acks may be multiple)."""

    def __init__(self):
        self.outstanding: set = set()
        self.low = 1
        self.acked = 0
        self.nacked = 0

    def sent(self, tag):
        self.outstanding.add(tag)

    def on_frame(self, frame):
        import pika

        m = frame.method
        ok = isinstance(m, pika.spec.Basic.Ack)
        if m.multiple:
            tags = [t for t in range(self.low, m.delivery_tag + 1) if t in self.outstanding]
            self.low = m.delivery_tag + 1
        else:
            tags = [m.delivery_tag] if m.delivery_tag in self.outstanding else []
        for t in tags:
            self.outstanding.discard(t)
        if ok:
            self.acked += len(tags)
        else:
            self.nacked += len(tags)


class RabbitClassicPeer(RabbitServerMixin, Peer):
    name = "rabbitmq-classic"
    client = "pika SelectConnection, async publisher confirms, sliding window"
    durability = "durable classic queue, persistent msgs, publisher confirms (confirm after fsync)"

    def _params(self):
        import pika

        return pika.ConnectionParameters(HOST, 5672, credentials=pika.PlainCredentials("guest", "guest"),
                                         connection_attempts=30, retry_delay=0.5)

    def _blocking(self):
        import pika

        return pika.BlockingConnection(self._params())

    def _run(self, on_channel, timeout):
        """Run a pika SelectConnection until the callbacks close it (or `timeout`)."""
        import pika

        err = {}

        def on_open(conn):
            conn.channel(on_open_callback=lambda ch: on_channel(conn, ch))

        def on_open_error(conn, e):
            err["e"] = e
            conn.ioloop.stop()

        def on_close(conn, reason):
            conn.ioloop.stop()

        conn = pika.SelectConnection(self._params(), on_open_callback=on_open,
                                     on_open_error_callback=on_open_error, on_close_callback=on_close)
        conn.ioloop.call_later(timeout, lambda: conn.close() if conn.is_open else conn.ioloop.stop())
        conn.ioloop.start()
        if "e" in err:
            raise RuntimeError(f"RabbitMQ connection failed: {err['e']!r}")

    async def setup(self, target, size):
        c = self._blocking()
        ch = c.channel()
        ch.queue_delete(target)
        ch.queue_declare(target, durable=True, arguments={"x-queue-type": "classic"})
        c.close()

    async def teardown(self, target):
        c = self._blocking()
        c.channel().queue_delete(target)
        c.close()

    async def pub(self, target, n, size):
        import pika

        data = payload_fixed(size)
        window = self.opts.get("window", 2000)
        props = pika.BasicProperties(delivery_mode=2)
        cf = _Confirms()
        st = {"sent": 0, "t0": 0, "t1": 0}

        def on_channel(conn, ch):
            def pump():
                while st["sent"] < n and len(cf.outstanding) < window:
                    ch.basic_publish("", target, data, props)
                    st["sent"] += 1
                    cf.sent(st["sent"])

            def on_confirm(frame):
                cf.on_frame(frame)
                if cf.acked + cf.nacked >= n:
                    st["t1"] = mono_ns()
                    conn.close()
                    return
                pump()

            def start(_f):
                st["t0"] = mono_ns()
                pump()

            ch.confirm_delivery(on_confirm, callback=start)

        self._run(on_channel, 600)
        return {"elapsed_s": (st["t1"] - st["t0"]) / 1e9, "acked": cf.acked, "errors": cf.nacked}

    async def cons(self, target, n):
        prefetch = self.opts.get("prefetch", 2000)
        ack_every = self.opts.get("ack_every", 500)
        st = {"got": 0, "bytes": 0, "t0": 0, "t1": 0}

        def on_channel(conn, ch):
            def on_msg(ch_, method, props, body):
                st["got"] += 1
                st["bytes"] += len(body)
                if st["got"] % ack_every == 0 or st["got"] >= n:
                    ch.basic_ack(method.delivery_tag, multiple=True)
                if st["got"] >= n:
                    st["t1"] = mono_ns()
                    conn.close()

            def start(_f):
                st["t0"] = mono_ns()
                ch.basic_consume(target, on_msg, auto_ack=False)

            ch.basic_qos(prefetch_count=prefetch, callback=start)

        self._run(on_channel, 600)
        if not st["t1"]:
            st["t1"] = mono_ns()
        return {"elapsed_s": (st["t1"] - st["t0"]) / 1e9, "received": st["got"], "bytes": st["bytes"]}

    async def lat_cons(self, target, expected, ready, timeout):
        rec = LatRecorder(expected)
        rec.done = None

        def on_channel(conn, ch):
            def on_msg(ch_, method, props, body):
                rec.record(body)
                if rec.count % 50 == 0 or rec.count >= expected:
                    ch.basic_ack(method.delivery_tag, multiple=True)
                if rec.count >= expected:
                    conn.close()

            def consuming(_f):
                ready()

            ch.basic_qos(prefetch_count=2000,
                         callback=lambda _f: ch.basic_consume(target, on_msg, auto_ack=False, callback=consuming))

        self._run(on_channel, timeout)
        return rec.result()

    async def lat_pub(self, target, rate, duration, size):
        import pika

        props = pika.BasicProperties(delivery_mode=2)
        total = int(rate * duration)
        interval = 1e9 / rate
        pad = b"p" * max(0, size - LAT_HDR.size)
        cf = _Confirms()
        st = {"i": 0, "max_lag": 0, "start": 0}
        tick_s = self.opts.get("tick_ms", 1.0) / 1000

        def on_channel(conn, ch):
            def tick():
                now = mono_ns()
                due = min(total, int((now - st["start"]) / interval) + 1) if now >= st["start"] else 0
                if due > st["i"]:
                    st["max_lag"] = max(st["max_lag"], now - (st["start"] + int(st["i"] * interval)))
                while st["i"] < due:
                    i = st["i"]
                    ch.basic_publish("", target, lat_payload(i, st["start"] + int(i * interval), pad), props)
                    st["i"] = i + 1
                    cf.sent(i + 1)
                if st["i"] < total:
                    nxt = st["start"] + int(st["i"] * interval)
                    conn.ioloop.call_later(max(tick_s, (nxt - mono_ns()) / 1e9), tick)

            def on_confirm(frame):
                cf.on_frame(frame)
                if cf.acked + cf.nacked >= total:
                    conn.close()

            def start(_f):
                st["start"] = mono_ns() + 20_000_000
                tick()

            ch.confirm_delivery(on_confirm, callback=start)

        self._run(on_channel, duration + 90)
        return {"sent": st["i"], "max_sched_lag_ms": round(st["max_lag"] / 1e6, 2), "errors": cf.nacked,
                "confirmed": cf.acked}



class RabbitStreamPeer(RabbitServerMixin, Peer):
    name = "rabbitmq-stream"
    client = "rstream (asyncio+uvloop), send_batch + confirm callback"
    durability = "stream queue (osiris log), confirm after write, no fsync per publish (see notes)"

    def _kw(self):
        return dict(host=HOST, port=5552, username="guest", password="guest")

    async def _producer(self):
        from rstream import Producer

        last = None
        for _ in range(100):
            try:
                p = Producer(**self._kw())
                await p.start()
                return p
            except Exception as e:
                last = e
                await asyncio.sleep(0.3)
        raise RuntimeError(f"cannot connect to RabbitMQ stream port: {last!r}")

    async def setup(self, target, size):
        p = await self._producer()
        try:
            await p.delete_stream(target, missing_ok=True)
        except Exception:
            pass
        await p.create_stream(target, exists_ok=True)
        await p.close()

    async def teardown(self, target):
        p = await self._producer()
        try:
            await p.delete_stream(target, missing_ok=True)
        except Exception:
            pass
        await p.close()

    async def pub(self, target, n, size):
        p = await self._producer()
        data = payload_fixed(size)
        batch = self.opts.get("batch", 500)
        window = self.opts.get("window", 10000)
        st = {"confirmed": 0, "errors": 0}
        ev = asyncio.Event()

        def on_confirm(status):
            if status.is_confirmed:
                st["confirmed"] += 1
            else:
                st["errors"] += 1
            ev.set()

        sent = 0
        t0 = mono_ns()
        deadline = time.monotonic() + 600
        while sent < n:
            while sent - st["confirmed"] - st["errors"] >= window and time.monotonic() < deadline:
                ev.clear()
                await asyncio.wait_for(ev.wait(), 30)
            k = min(batch, n - sent)
            await p.send_batch(target, [data] * k, on_publish_confirm=on_confirm)
            sent += k
        while st["confirmed"] + st["errors"] < n and time.monotonic() < deadline:
            ev.clear()
            await asyncio.wait_for(ev.wait(), 30)
        t1 = mono_ns()
        await p.close()
        return {"elapsed_s": (t1 - t0) / 1e9, "acked": st["confirmed"], "errors": st["errors"]}

    async def cons(self, target, n):
        from rstream import Consumer, ConsumerOffsetSpecification, OffsetType

        c = Consumer(**self._kw())
        await c.start()
        st = {"got": 0, "bytes": 0, "last": 0}
        done = asyncio.Event()

        async def cb(msg, ctx):
            st["got"] += 1
            st["bytes"] += len(msg)
            st["last"] = ctx.offset
            if st["got"] >= n:
                done.set()

        t0 = mono_ns()
        await c.subscribe(target, cb, subscriber_name="bench",
                          offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST, None),
                          initial_credit=self.opts.get("credit", 10))
        try:
            await asyncio.wait_for(done.wait(), 600)
        except asyncio.TimeoutError:
            pass
        # streams have no per-message ack: the consumer "acknowledges" by storing its offset
        await c.store_offset(target, "bench", st["last"])
        t1 = mono_ns()
        await c.close()
        return {"elapsed_s": (t1 - t0) / 1e9, "received": st["got"], "bytes": st["bytes"]}

    async def lat_cons(self, target, expected, ready, timeout):
        from rstream import Consumer, ConsumerOffsetSpecification, OffsetType

        c = Consumer(**self._kw())
        await c.start()
        rec = LatRecorder(expected)
        rec.done = asyncio.Event()
        last = [0]

        async def cb(msg, ctx):
            rec.record(msg)
            last[0] = ctx.offset

        await c.subscribe(target, cb, subscriber_name="lat",
                          offset_specification=ConsumerOffsetSpecification(OffsetType.NEXT, None))
        ready()
        try:
            await asyncio.wait_for(rec.done.wait(), timeout)
        except asyncio.TimeoutError:
            pass
        try:
            await c.store_offset(target, "lat", last[0])
        except Exception:
            pass
        await c.close()
        return rec.result()

    async def lat_pub(self, target, rate, duration, size):
        p = await self._producer()
        st = {"confirmed": 0, "errors": 0}

        def on_confirm(status):
            if status.is_confirmed:
                st["confirmed"] += 1
            else:
                st["errors"] += 1

        async def send(batch):
            await p.send_batch(target, batch, on_publish_confirm=on_confirm)

        r = await paced_async(rate, duration, size, send, self.opts.get("tick_ms", 1.0) / 1000)
        deadline = time.monotonic() + 60
        while st["confirmed"] + st["errors"] < r["sent"] and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        r["errors"] = st["errors"]
        r["confirmed"] = st["confirmed"]
        await p.close()
        return r


# ---- Pulsar protocol (official pulsar-client) -------------------------------
class PulsarPeer(Peer):
    """Any broker speaking the Pulsar binary protocol.  No server is started:
    point --pulsar-url at it.  Not exercised against a real broker when this
    file was written (no Pulsar distribution is installable here)."""

    name = "pulsar"
    client = "pulsar-client (C++ core), producer batching, send_async"
    needs_server = False

    def __init__(self, opts):
        super().__init__(opts)
        self.url = opts.get("pulsar_url") or f"pulsar://{HOST}:6650"
        self.durability = opts.get("pulsar_durability") or "as configured in the broker under test"

    def server_version(self):
        return f"external broker at {self.url}"

    def _topic(self, target):
        return target if "://" in target else f"persistent://public/default/{target}"

    def _mod(self):
        # {"client": "quasar"}: Quasar's own client (`import quasar.client as pulsar`, same API shape); run
        # peers.py with a Python that has the project installed (e.g. the project's .venv)
        import importlib

        return importlib.import_module("quasar.client" if self.opts.get("client") == "quasar" else "pulsar")

    def _ok(self, res):
        if self.opts.get("client") == "quasar":
            return res is None  # quasar.client passes the error (or None) to the callback
        import pulsar

        return res == pulsar.Result.Ok

    def _client(self):
        pulsar = self._mod()
        if self.opts.get("client") == "quasar":
            return pulsar.Client(self.url, operation_timeout_seconds=30)
        return pulsar.Client(self.url, operation_timeout_seconds=30, io_threads=1, message_listener_threads=1,
                             logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))

    async def setup(self, target, size):
        pulsar = self._mod()

        c = self._client()
        # create the subscription first so that the backlog is retained for `cons`
        s = c.subscribe(self._topic(target), "bench", consumer_type=pulsar.ConsumerType.Exclusive,
                        initial_position=pulsar.InitialPosition.Earliest)
        s.close()
        c.close()

    async def teardown(self, target):
        pass

    async def pub(self, target, n, size):
        c = self._client()
        prod = c.create_producer(self._topic(target), batching_enabled=bool(self.opts.get("batching", True)),
                                 batching_max_messages=self.opts.get("batch", 1000),
                                 batching_max_allowed_size_in_bytes=1024 * 1024,
                                 batching_max_publish_delay_ms=self.opts.get("linger_ms", 10),
                                 max_pending_messages=self.opts.get("window", 10000),
                                 block_if_queue_full=True, send_timeout_millis=60000)
        data = payload_fixed(size)
        st = {"ok": 0, "err": 0}
        lock = threading.Lock()
        done = threading.Event()

        def cb(res, _msg_id):
            with lock:
                if self._ok(res):
                    st["ok"] += 1
                else:
                    st["err"] += 1
                if st["ok"] + st["err"] >= n:
                    done.set()

        t0 = mono_ns()
        if self.opts.get("callback", True):
            for _ in range(n):
                prod.send_async(data, cb)
            prod.flush()
            done.wait(600)
        else:  # the client's best case: no Python callback per message; flush() waits for every receipt
            for _ in range(n):
                prod.send_async(data, None)
            prod.flush()
            st["ok"] = n
        t1 = mono_ns()
        prod.close()
        c.close()
        return {"elapsed_s": (t1 - t0) / 1e9, "acked": st["ok"], "errors": st["err"]}

    async def cons(self, target, n):
        pulsar = self._mod()

        c = self._client()
        s = c.subscribe(self._topic(target), "bench", consumer_type=pulsar.ConsumerType.Exclusive,
                        initial_position=pulsar.InitialPosition.Earliest,
                        receiver_queue_size=self.opts.get("prefetch", 1000))
        got = 0
        nbytes = 0
        t0 = mono_ns()
        deadline = time.monotonic() + 600
        while got < n and time.monotonic() < deadline:
            try:
                m = s.receive(timeout_millis=5000)
            except Exception:
                continue
            nbytes += len(m.data())
            s.acknowledge(m)
            got += 1
        t1 = mono_ns()
        s.close()
        c.close()
        return {"elapsed_s": (t1 - t0) / 1e9, "received": got, "bytes": nbytes}

    async def lat_cons(self, target, expected, ready, timeout):
        pulsar = self._mod()

        c = self._client()
        s = c.subscribe(self._topic(target), "lat", consumer_type=pulsar.ConsumerType.Exclusive,
                        initial_position=pulsar.InitialPosition.Latest)
        rec = LatRecorder(expected)
        ready()
        deadline = time.monotonic() + timeout
        while rec.count < expected and time.monotonic() < deadline:
            try:
                m = s.receive(timeout_millis=1000)
            except Exception:
                continue
            rec.record(m.data())
            s.acknowledge(m)
        s.close()
        c.close()
        return rec.result()

    async def lat_pub(self, target, rate, duration, size):
        pulsar = self._mod()

        c = self._client()
        batching = bool(self.opts.get("lat_batching", False))
        prod = c.create_producer(self._topic(target), batching_enabled=batching,
                                 batching_max_publish_delay_ms=self.opts.get("linger_ms", 10),
                                 max_pending_messages=100000, block_if_queue_full=True)
        st = {"ok": 0, "err": 0}
        lock = threading.Lock()

        def cb(res, _mid):
            with lock:
                if self._ok(res):
                    st["ok"] += 1
                else:
                    st["err"] += 1

        async def send(batch):
            for p in batch:
                prod.send_async(p, cb)

        r = await paced_async(rate, duration, size, send, self.opts.get("tick_ms", 1.0) / 1000)
        prod.flush()
        deadline = time.monotonic() + 60
        while st["ok"] + st["err"] < r["sent"] and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        r["errors"] = st["err"]
        prod.close()
        c.close()
        return r


def _venv_nats():
    cand = os.path.join(os.path.dirname(sys.executable), "nats-server")
    return cand if os.path.exists(cand) else shutil.which("nats-server") or "nats-server"


def make_peer(name: str, opts: dict) -> Peer:
    if name == "nats":
        return NatsPeer(opts, "nats", "/usr/bin/nats-server" if os.path.exists("/usr/bin/nats-server")
                        else (shutil.which("nats-server") or "nats-server"), None,
                        "JetStream file store R1; ack after write to page cache, no fsync before ack "
                        "(2.9.x has no sync option)")
    if name == "nats215":
        return NatsPeer(opts, "nats215", _venv_nats(), "2m",
                        "JetStream file store R1; sync_interval 2m (2.15 default): no fsync before ack")
    if name == "nats215-always":
        return NatsPeer(opts, "nats215-always", _venv_nats(), "always",
                        "JetStream file store R1; sync_interval always: fsync before ack")
    if name == "redis-everysec":
        return RedisPeer(opts, name, "everysec")
    if name == "redis-always":
        return RedisPeer(opts, name, "always")
    if name == "rabbitmq-classic":
        return RabbitClassicPeer(opts)
    if name == "rabbitmq-classic-aiopika":
        return RabbitClassicAioPeer(opts)
    if name == "rabbitmq-stream":
        return RabbitStreamPeer(opts)
    if name == "pulsar":
        return PulsarPeer(opts)
    raise SystemExit(f"unknown peer {name!r}; known: {', '.join(PEERS)}")


PEERS = ["nats", "nats215", "nats215-always", "redis-everysec", "redis-always", "rabbitmq-classic",
         "rabbitmq-classic-aiopika", "rabbitmq-stream", "pulsar"]


# --------------------------------------------------------------------------
# worker process
# --------------------------------------------------------------------------
def worker_main(spec_json: str) -> None:
    spec = json.loads(spec_json)
    loop_kind = install_uvloop()
    peer = make_peer(spec["peer"], spec.get("opts", {}))
    op = spec["op"]
    hard = int(spec.get("hard_timeout", 900))
    signal.alarm(hard)  # absolute bound on any worker

    def ready():
        print("READY", flush=True)

    async def main():
        if op == "setup":
            return await peer.setup(spec["target"], spec.get("size", 100)) or {}
        if op == "teardown":
            return await peer.teardown(spec["target"]) or {}
        if op == "pub":
            return await peer.pub(spec["target"], spec["n"], spec["size"])
        if op == "cons":
            return await peer.cons(spec["target"], spec["n"])
        if op == "lat_cons":
            return await peer.lat_cons(spec["target"], spec["expected"], ready, spec["timeout"])
        if op == "lat_pub":
            return await peer.lat_pub(spec["target"], spec["rate"], spec["duration"], spec["size"])
        raise SystemExit(f"bad op {op}")

    cpu0 = time.process_time()
    res = asyncio.run(main())
    res = dict(res or {})
    res["client_cpu_s"] = round(time.process_time() - cpu0, 3)
    res["loop"] = loop_kind
    print("RESULT " + json.dumps(res), flush=True)
    # some clients leave non-daemon threads behind; do not let them hang the worker
    sys.stdout.flush()
    os._exit(0)


def run_worker(spec: dict, timeout: float, on_ready=None) -> dict:
    """Run a worker; if on_ready is given it is called once the worker prints READY
    and must return; the worker is then awaited."""
    argv = [sys.executable, os.path.abspath(__file__), "_worker", json.dumps(spec)]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
    result = None
    err_lines: list[str] = []

    def drain_err():
        for line in p.stderr:
            err_lines.append(line)

    te = threading.Thread(target=drain_err, daemon=True)
    te.start()
    deadline = time.monotonic() + timeout
    ready_called = False
    try:
        while True:
            line = p.stdout.readline()
            if not line:
                break
            if line.startswith("READY") and on_ready and not ready_called:
                ready_called = True
                on_ready()
            elif line.startswith("RESULT "):
                result = json.loads(line[7:])
            if time.monotonic() > deadline:
                break
        p.wait(timeout=max(1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        pass
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(10)
    te.join(2)
    if result is None:
        raise RuntimeError(f"worker {spec['op']} for {spec['peer']} failed (rc={p.returncode}): "
                           + "".join(err_lines[-30:]))
    return result


class _BgWorker:
    def __init__(self, spec, timeout):
        self.spec, self.timeout = spec, timeout
        self.result = None
        self.error = None
        self.ready = threading.Event()
        self.t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        try:
            self.result = run_worker(self.spec, self.timeout, on_ready=self.ready.set)
        except Exception as e:
            self.error = e
        finally:
            self.ready.set()

    def start(self):
        self.t.start()
        return self

    def join(self):
        self.t.join(self.timeout + 30)


# --------------------------------------------------------------------------
# server management (start by hand, stop by the PID we started)
# --------------------------------------------------------------------------
def port_open(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=0.5):
            return True
    except OSError:
        return False


class ServerSet:
    def __init__(self, peer: Peer, base=TMP_BASE, keep=False):
        self.peer = peer
        self.keep = keep
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        self.datadir = os.path.join(base, f"{peer.name}-{stamp}-{os.getpid()}")
        self.procs: list[tuple[dict, subprocess.Popen]] = []
        self.startup_s = None

    def start(self):
        busy = [p for p in self.peer.ports() if port_open(p)]
        if busy:
            raise RuntimeError(f"ports already in use on {HOST}: {busy}; refusing to start {self.peer.name}")
        os.makedirs(self.datadir, exist_ok=True)
        t0 = time.monotonic()
        for spec in self.peer.server_cmd(self.datadir):
            env = dict(os.environ)
            env.update(spec.get("env", {}))
            log = open(os.path.join(self.datadir, f"{spec['name']}.out"), "w")
            p = subprocess.Popen(spec["argv"], env=env, stdout=log, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, start_new_session=True, cwd=self.datadir)
            self.procs.append((spec, p))
            deadline = time.monotonic() + spec.get("ready_timeout", 60)
            while not port_open(spec["ready_port"]):
                if p.poll() is not None:
                    raise RuntimeError(f"{spec['name']} exited rc={p.returncode}; see {log.name}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{spec['name']} not ready after {spec.get('ready_timeout', 60)}s")
                time.sleep(0.2)
        self.startup_s = round(time.monotonic() - t0, 1)
        return self

    def stop(self):
        for spec, p in reversed(self.procs):
            pids = [p.pid]
            pf = spec.get("pidfile")
            if pf and os.path.exists(pf):
                try:
                    pids.insert(0, int(open(pf).read().strip()))  # e.g. beam.smp, a child we started
                except Exception:
                    pass
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)  # the session/group we started
                except ProcessLookupError:
                    pass
                p.wait(10)
            # anything left in the process group we created
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass
        self.procs = []
        if not self.keep:
            shutil.rmtree(self.datadir, ignore_errors=True)

    def server_pids(self) -> list[int]:
        pids = []
        for spec, p in self.procs:
            if spec["name"] == "epmd":
                continue
            pf = spec.get("pidfile")
            if pf and os.path.exists(pf):
                try:
                    pids.append(int(open(pf).read().strip()))
                    continue
                except ValueError:
                    pass
            pids.append(p.pid)
        return pids

    def cpu_s(self) -> float:
        """utime+stime (all threads) of the server processes we started."""
        tot = 0
        tck = os.sysconf("SC_CLK_TCK")
        for pid in self.server_pids():
            try:
                f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
                tot += int(f[11]) + int(f[12])
            except (OSError, IndexError, ValueError):
                pass
        return tot / tck

    def du_bytes(self) -> int:
        tot = 0
        for root, _d, files in os.walk(self.datadir):
            for f in files:
                try:
                    tot += os.path.getsize(os.path.join(root, f))
                except OSError:
                    pass
        return tot


class SyncTracer:
    """Counts fsync/fdatasync/sync_file_range/msync calls of the server processes we started
    (strace -f -c attached by PID).  Verification only: it slows the server down."""

    def __init__(self, servers: "ServerSet"):
        self.out = os.path.join(TMP_BASE, f"strace-{os.getpid()}-{time.monotonic_ns()}.txt")
        pids = []
        for spec, p in servers.procs:
            pf = spec.get("pidfile")
            if pf and os.path.exists(pf):
                pids.append(int(open(pf).read().strip()))
            elif spec["name"] != "epmd":
                pids.append(p.pid)
        argv = ["strace", "-f", "-c", "-e", "trace=fsync,fdatasync,sync_file_range,msync", "-o", self.out]
        for pid in pids:
            argv += ["-p", str(pid)]
        self.p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)

    def stop(self) -> dict:
        self.p.send_signal(signal.SIGINT)
        try:
            self.p.wait(30)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait(10)
        counts = {}
        try:
            for line in open(self.out):
                parts = line.split()
                if len(parts) >= 5 and parts[-1] in ("fsync", "fdatasync", "sync_file_range", "msync"):
                    counts[parts[-1]] = int(parts[3])
            os.remove(self.out)
        except (OSError, ValueError):
            pass
        return counts



# --------------------------------------------------------------------------
# orchestration
# --------------------------------------------------------------------------
def machine_info() -> dict:
    cpu = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = "?"
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal"):
                mem = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "cpu": cpu, "mem": mem, "kernel": platform.release(),
            "python": platform.python_version(), "host": socket.gethostname()}


def append_records(path: str, recs: list[dict]) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "a") as f:
        for r in recs:
            f.write(json.dumps(r) + "\n")


def run_peer(name: str, args) -> list[dict]:
    opts = dict(args.opt or {})
    opts.setdefault("tick_ms", args.tick_ms)
    if args.pulsar_url:
        opts["pulsar_url"] = args.pulsar_url
    peer = make_peer(name, opts)
    run_id = uuid.uuid4().hex[:8]
    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    servers = None
    recs: list[dict] = []
    base = {"run_id": run_id, "peer": peer.name, "client": peer.client, "durability": peer.durability,
            "server": peer.server_version(), "date": started, "machine": machine_info(),
            "cmdline": " ".join([os.path.basename(sys.executable)] + sys.argv)}
    workloads = args.workloads.split(",")
    sizes = [int(s) for s in args.sizes.split(",")]
    t_suite = time.monotonic()
    try:
        if peer.needs_server and not args.no_server:
            servers = ServerSet(peer, keep=args.keep).start()
            print(f"[{peer.name}] server up in {servers.startup_s}s  ({peer.server_version()})", flush=True)
            base["startup_s"] = servers.startup_s
        wopts = {"peer": peer.name, "opts": opts}
        for rep in range(args.reps):
            for size in sizes:
                if not ({"pub", "cons"} & set(workloads)):
                    break
                n = args.n if size <= 100 else (args.n_large or args.n)
                target = f"bench-{run_id}-{rep}-{size}"
                run_worker({**wopts, "op": "setup", "target": target, "size": size}, 120)
                if "pub" in workloads:
                    tracer = SyncTracer(servers) if (args.strace_sync and servers) else None
                    c0 = servers.cpu_s() if servers else None
                    r = run_worker({**wopts, "op": "pub", "target": target, "n": n, "size": size}, 700)
                    rec = {**base, "workload": "pub", "rep": rep, "size": size, "n": n, **r}
                    if servers:
                        rec["server_cpu_s"] = round(servers.cpu_s() - c0, 2)
                    if tracer:
                        rec["sync_syscalls"] = tracer.stop()
                        print(f"[{peer.name}] sync syscalls during pub: {rec['sync_syscalls']}", flush=True)
                    rec["msg_s"] = n / r["elapsed_s"]
                    rec["mb_s"] = n * size / r["elapsed_s"] / 1e6
                    if servers:
                        rec["disk_bytes_after_pub"] = servers.du_bytes()
                    recs.append(rec)
                    print(f"[{peer.name}] rep{rep} pub  {size:>5}B n={n}: {rec['msg_s']:>10.0f} msg/s "
                          f"{rec['mb_s']:7.1f} MB/s  acked={r.get('acked')}  cpu client/server "
                          f"{r.get('client_cpu_s')}/{rec.get('server_cpu_s')}s in {r['elapsed_s']:.1f}s", flush=True)
                if "cons" in workloads:
                    c0 = servers.cpu_s() if servers else None
                    r = run_worker({**wopts, "op": "cons", "target": target, "n": n}, 700)
                    rec = {**base, "workload": "cons", "rep": rep, "size": size, "n": n, **r}
                    if servers:
                        rec["server_cpu_s"] = round(servers.cpu_s() - c0, 2)
                    rec["msg_s"] = r["received"] / r["elapsed_s"]
                    rec["mb_s"] = r["received"] * size / r["elapsed_s"] / 1e6
                    recs.append(rec)
                    print(f"[{peer.name}] rep{rep} cons {size:>5}B n={n}: {rec['msg_s']:>10.0f} msg/s "
                          f"{rec['mb_s']:7.1f} MB/s  received={r['received']}  cpu client/server "
                          f"{r.get('client_cpu_s')}/{rec.get('server_cpu_s')}s in {r['elapsed_s']:.1f}s", flush=True)
                run_worker({**wopts, "op": "teardown", "target": target}, 120)
            if "lat" in workloads:
                target = f"lat-{run_id}-{rep}"
                run_worker({**wopts, "op": "setup", "target": target, "size": args.lat_size}, 120)
                expected = int(args.rate * args.duration)
                c0 = servers.cpu_s() if servers else None
                cons = _BgWorker({**wopts, "op": "lat_cons", "target": target, "expected": expected,
                                  "timeout": args.duration + 30}, args.duration + 90).start()
                cons.ready.wait(120)
                if cons.error:
                    raise cons.error
                time.sleep(0.5)
                pr = run_worker({**wopts, "op": "lat_pub", "target": target, "rate": args.rate,
                                 "duration": args.duration, "size": args.lat_size}, args.duration + 180)
                cons.join()
                if cons.error:
                    raise cons.error
                cr = cons.result
                rec = {**base, "workload": "lat", "rep": rep, "size": args.lat_size, "rate": args.rate,
                       "duration": args.duration, "tick_ms": opts["tick_ms"], "pub": pr, **cr}
                if servers:
                    rec["server_cpu_s"] = round(servers.cpu_s() - c0, 2)
                recs.append(rec)
                ls = cr.get("lat_send", {})
                lsc = cr.get("lat_sched", {})
                print(f"[{peer.name}] rep{rep} lat  {args.lat_size}B @{args.rate}/s: recv={cr['received']}/"
                      f"{expected} from-send p50={ls.get('p50_us')}us p99={ls.get('p99_us')}us "
                      f"p99.9={ls.get('p999_us')}us max={ls.get('max_us')}us | from-schedule p50="
                      f"{lsc.get('p50_us')} p99={lsc.get('p99_us')} p99.9={lsc.get('p999_us')} "
                      f"(pub max lag {pr.get('max_sched_lag_ms')}ms)", flush=True)
                run_worker({**wopts, "op": "teardown", "target": target}, 120)
    finally:
        if servers:
            servers.stop()
            print(f"[{peer.name}] server stopped", flush=True)
        append_records(args.out, recs)
    print(f"[{peer.name}] suite took {time.monotonic() - t_suite:.0f}s; {len(recs)} records -> {args.out}")
    return recs


# --------------------------------------------------------------------------
# machine limits: fio + loopback TCP
# --------------------------------------------------------------------------
def _fio(name, extra, directory, runtime, time_based=True):
    os.makedirs(directory, exist_ok=True)
    fn = os.path.join(directory, f"{name}.dat")
    argv = ["fio", f"--name={name}", f"--filename={fn}", "--output-format=json",
            f"--runtime={runtime}"] + (["--time_based"] if time_based else []) + extra
    out = subprocess.run(argv, capture_output=True, text=True, timeout=runtime + 120)
    try:
        os.remove(fn)
    except OSError:
        pass
    if out.returncode != 0:
        raise RuntimeError(f"fio failed: {out.stderr[-2000:]}")
    j = json.loads(out.stdout[out.stdout.index("{"):])["jobs"][0]
    w = j["write"]
    r = {"cmd": " ".join(argv), "iops": w["iops"], "bw_MBps": w["bw_bytes"] / 1e6,
         "write_clat_p50_us": w["clat_ns"]["percentile"].get("50.000000", 0) / 1000,
         "write_clat_p99_us": w["clat_ns"]["percentile"].get("99.000000", 0) / 1000}
    if "sync" in j and j["sync"].get("lat_ns", {}).get("percentile"):
        pc = j["sync"]["lat_ns"]["percentile"]
        r.update({"sync_p50_us": pc["50.000000"] / 1000, "sync_p99_us": pc["99.000000"] / 1000,
                  "sync_p999_us": pc["99.900000"] / 1000})
    return r


def _py_loopback_bw(seconds=5.0, chunk=256 * 1024):
    """Python -> Python loopback TCP throughput (one sender process, one receiver process)."""
    code = r"""
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 0)); s.listen(1)
print(s.getsockname()[1], flush=True)
c, _ = s.accept(); buf = bytearray(1 << 20); mv = memoryview(buf); n = 0
t0 = None
while True:
    k = c.recv_into(mv)
    if not k: break
    if t0 is None: t0 = time.monotonic()
    n += k
print(n, time.monotonic() - t0, flush=True)
"""
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    port = int(p.stdout.readline())
    s = socket.create_connection((HOST, port))
    data = b"x" * chunk
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        s.sendall(data)
    s.close()
    n, dt = p.stdout.readline().split()
    p.wait(30)
    return int(n) / float(dt) / 1e6


def _py_loopback_rtt(iters=20000, seconds=10.0, size=100):
    """Python -> Python 100-byte request/response round trip on loopback TCP."""
    from hdrh.histogram import HdrHistogram

    code = r"""
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 0)); s.listen(1)
print(s.getsockname()[1], flush=True)
c, _ = s.accept(); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
while True:
    d = c.recv(65536)
    if not d: break
    c.sendall(d)
"""
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    port = int(p.stdout.readline())
    s = socket.create_connection((HOST, port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    h = HdrHistogram(1, 10_000_000, 3)
    msg = b"r" * size
    end = time.monotonic() + seconds
    for _ in range(iters):
        t0 = mono_ns()
        s.sendall(msg)
        got = 0
        while got < size:
            got += len(s.recv(65536))
        h.record_value(max(1, (mono_ns() - t0) // 1000))
        if time.monotonic() > end:
            break
    s.close()
    p.wait(30)
    return {"n": h.get_total_count(), "p50_us": h.get_value_at_percentile(50),
            "p99_us": h.get_value_at_percentile(99), "p999_us": h.get_value_at_percentile(99.9)}


def _iperf3(seconds=5, port=15201):
    if not shutil.which("iperf3"):
        return None
    srv = subprocess.Popen(["iperf3", "-s", "-B", HOST, "-p", str(port)], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        out = None
        for _ in range(3):
            r = subprocess.run(["iperf3", "-c", HOST, "-p", str(port), "-t", str(seconds), "-J"],
                               capture_output=True, text=True, timeout=seconds + 30)
            if r.returncode == 0:
                out = json.loads(r.stdout)
                break
            time.sleep(0.5)
        if out is None:
            return None
        return out["end"]["sum_received"]["bits_per_second"] / 8 / 1e6
    finally:
        if srv.poll() is None:
            srv.terminate()
            try:
                srv.wait(10)
            except subprocess.TimeoutExpired:
                srv.kill()


def run_limits(args) -> list[dict]:
    recs = []
    info = machine_info()
    date = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    d = args.fio_dir
    tests = {
        "fio-seq-1m-direct": ["--rw=write", "--bs=1M", "--size=2G", "--ioengine=psync", "--direct=1"],
        "fio-seq-1m-buffered+fsync": ["--rw=write", "--bs=1M", "--size=2G", "--ioengine=psync", "--end_fsync=1",
                                      "--fsync=64"],
        "fio-4k-fdatasync-prealloc": ["--rw=write", "--bs=4k", "--size=256M", "--ioengine=sync",
                                      "--fdatasync=1"],
        # appending (file grows, so each fdatasync also commits metadata) - not time_based:
        # fio stops at 256 MiB or after the runtime, whichever comes first
        "fio-4k-fdatasync-append": ["--rw=write", "--bs=4k", "--size=256M", "--file_append=1",
                                    "--ioengine=sync", "--fdatasync=1"],
    }
    for rep in range(args.reps):
        for name, extra in tests.items():
            try:
                r = _fio(name, extra, d, args.fio_runtime, time_based=(name != "fio-4k-fdatasync-append"))
            except Exception as e:
                r = {"error": str(e)}
            rec = {"kind": "limits", "test": name, "rep": rep, "date": date, "machine": info, **r}
            recs.append(rec)
            print(f"[limits] rep{rep} {name}: " + json.dumps({k: (round(v, 1) if isinstance(v, float) else v)
                                                               for k, v in r.items() if k != "cmd"}), flush=True)
        bw = _iperf3(5)
        recs.append({"kind": "limits", "test": "iperf3-loopback", "rep": rep, "date": date, "machine": info,
                     "bw_MBps": bw, "cmd": f"iperf3 -s -B {HOST} -p 15201 ; iperf3 -c {HOST} -p 15201 -t 5 -J"})
        print(f"[limits] rep{rep} iperf3 loopback: {bw} MB/s", flush=True)
        pbw = _py_loopback_bw()
        recs.append({"kind": "limits", "test": "python-loopback-bw", "rep": rep, "date": date, "machine": info,
                     "bw_MBps": pbw, "cmd": "peers.py limits (_py_loopback_bw: 256 KiB sendall, recv_into)"})
        print(f"[limits] rep{rep} python loopback bw: {pbw:.0f} MB/s", flush=True)
        rtt = _py_loopback_rtt()
        recs.append({"kind": "limits", "test": "python-loopback-rtt-100B", "rep": rep, "date": date,
                     "machine": info, **rtt, "cmd": "peers.py limits (_py_loopback_rtt: 100 B echo, TCP_NODELAY)"})
        print(f"[limits] rep{rep} python loopback rtt 100B: {rtt}", flush=True)
    append_records(args.out, recs)
    return recs


# --------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------
def _load(paths):
    recs = []
    for p in paths:
        if os.path.exists(p):
            for line in open(p):
                line = line.strip()
                if line:
                    recs.append(json.loads(line))
    return recs


def _med_range(vals, fmt="{:.0f}"):
    vals = [v for v in vals if v is not None]
    if not vals:
        return "-"
    m = statistics.median(vals)
    if len(vals) == 1:
        return fmt.format(m)
    return f"{fmt.format(m)} ({fmt.format(min(vals))}–{fmt.format(max(vals))})"


def report(args) -> str:
    recs = _load(args.inputs)
    if args.last_only:
        # keep only the newest run_id per peer
        newest = {}
        for r in recs:
            if "peer" in r:
                newest[r["peer"]] = r["run_id"]
        recs = [r for r in recs if "peer" not in r or r["run_id"] == newest[r["peer"]]]
    out = []
    groups: dict = {}
    for r in recs:
        if "workload" not in r:
            continue
        if r["workload"] == "lat" and "tick_ms" not in r and not args.include_untick:
            continue  # first runs paced without the 1 ms tick floor (one batch per message); not comparable
        key = (r["workload"], r["size"], r["peer"])
        groups.setdefault(key, []).append(r)
    order = {p: i for i, p in enumerate(PEERS)}
    for wl, title in (("pub", "Publish throughput (wait for every durable ack)"),
                      ("cons", "Consume throughput (read + acknowledge backlog)")):
        out.append(f"### {title}\n")
        out.append("| peer | client | durability | size | N | reps | msg/s median (min–max) | MB/s median (min–max) "
                   "| CPU % of one core: client / server (median) |")
        out.append("|---|---|---|---|---|---|---|---|---|")
        for key in sorted((k for k in groups if k[0] == wl), key=lambda k: (k[1], order.get(k[2], 99))):
            rs = groups[key]
            cc = [100 * r["client_cpu_s"] / r["elapsed_s"] for r in rs if r.get("client_cpu_s") is not None]
            sc = [100 * r["server_cpu_s"] / r["elapsed_s"] for r in rs if r.get("server_cpu_s") is not None]
            cpu = (f"{statistics.median(cc):.0f} / {statistics.median(sc):.0f}" if cc and sc else "-")
            out.append(f"| {key[2]} | {rs[0]['client']} | {rs[0]['durability']} | {key[1]} B | {rs[0]['n']} | "
                       f"{len(rs)} | {_med_range([r['msg_s'] for r in rs])} | "
                       f"{_med_range([r['mb_s'] for r in rs], '{:.1f}')} | {cpu} |")
        out.append("")
    out.append("### End-to-end latency at fixed rate (from send timestamp; µs)\n")
    out.append("| peer | durability | size | rate | reps | received | p50 | p99 | p99.9 | max | "
               "from-schedule p50 / p99 / p99.9 |")
    out.append("|---|---|---|---|---|---|---|---|---|---|---|")
    for key in sorted((k for k in groups if k[0] == "lat"), key=lambda k: (k[1], order.get(k[2], 99))):
        rs = groups[key]
        g = lambda f, k: [r.get(f, {}).get(k) for r in rs]  # noqa: E731
        exp = int(rs[0]["rate"] * rs[0]["duration"])
        out.append(
            f"| {key[2]} | {rs[0]['durability']} | {key[1]} B | {rs[0]['rate']}/s × {rs[0]['duration']}s | {len(rs)} | "
            f"{min(r['received'] for r in rs)}/{exp} (min) | "
            f"{_med_range(g('lat_send', 'p50_us'))} | {_med_range(g('lat_send', 'p99_us'))} | "
            f"{_med_range(g('lat_send', 'p999_us'))} | {_med_range(g('lat_send', 'max_us'))} | "
            f"{_med_range(g('lat_sched', 'p50_us'))} / {_med_range(g('lat_sched', 'p99_us'))} / "
            f"{_med_range(g('lat_sched', 'p999_us'))} |")
    out.append("")
    lim = [r for r in recs if r.get("kind") == "limits"]
    if lim:
        out.append("### Machine limits\n")
        out.append("| test | reps | MB/s | IOPS | fdatasync p50 µs | p99 µs | p99.9 µs | RTT p50 / p99 / p99.9 µs |")
        out.append("|---|---|---|---|---|---|---|---|")
        byt: dict = {}
        for r in lim:
            byt.setdefault(r["test"], []).append(r)
        for t, rs in byt.items():
            out.append(f"| {t} | {len(rs)} | {_med_range([r.get('bw_MBps') for r in rs], '{:.0f}')} | "
                       f"{_med_range([r.get('iops') for r in rs]) if 'iops' in rs[0] else '-'} | "
                       f"{_med_range([r.get('sync_p50_us') for r in rs]) if 'sync_p50_us' in rs[0] else '-'} | "
                       f"{_med_range([r.get('sync_p99_us') for r in rs]) if 'sync_p99_us' in rs[0] else '-'} | "
                       f"{_med_range([r.get('sync_p999_us') for r in rs]) if 'sync_p999_us' in rs[0] else '-'} | "
                       + (f"{_med_range([r.get('p50_us') for r in rs])} / {_med_range([r.get('p99_us') for r in rs])}"
                          f" / {_med_range([r.get('p999_us') for r in rs])}" if 'p50_us' in rs[0] else "-") + " |")
        out.append("")
    text = "\n".join(out)
    print(text)
    return text


# --------------------------------------------------------------------------
def main(argv=None):
    if len(sys.argv) > 2 and sys.argv[1] == "_worker":
        worker_main(sys.argv[2])
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run the workloads against one or more peers")
    r.add_argument("peers", nargs="+", choices=PEERS)
    r.add_argument("--n", type=int, default=200_000, help="messages for pub/cons at 100 B")
    r.add_argument("--n-large", type=int, default=None, help="messages for sizes > 100 B (default: --n)")
    r.add_argument("--sizes", default="100,1024")
    r.add_argument("--reps", type=int, default=3)
    r.add_argument("--rate", type=float, default=5000.0)
    r.add_argument("--duration", type=float, default=10.0)
    r.add_argument("--lat-size", type=int, default=100)
    r.add_argument("--tick-ms", type=float, default=1.0,
                   help="lat producer wakes at most every TICK ms and sends all due messages")
    r.add_argument("--workloads", default="pub,cons,lat")
    r.add_argument("--out", default=DEFAULT_OUT)
    r.add_argument("--no-server", action="store_true", help="do not start a server (use one already running)")
    r.add_argument("--keep", action="store_true", help="keep the server data dir under the temp directory")
    r.add_argument("--pulsar-url", default=None)
    r.add_argument("--strace-sync", action="store_true",
                   help="verification: count the server's fsync-family syscalls during pub (slows it down)")
    r.add_argument("--opt", type=json.loads, default=None,
                   help='JSON dict of adapter options, e.g. \'{"window": 4000, "batch": 1000}\'')
    li = sub.add_parser("limits", help="fio + loopback TCP limits of this machine")
    li.add_argument("--reps", type=int, default=3)
    li.add_argument("--fio-dir", default=os.path.join(tempfile.gettempdir(), "peers", "fio"))
    li.add_argument("--fio-runtime", type=int, default=10)
    li.add_argument("--out", default=os.path.join(HERE, "results", "limits.jsonl"))
    rp = sub.add_parser("report", help="markdown tables (median and range over reps)")
    rp.add_argument("inputs", nargs="*", default=[DEFAULT_OUT, os.path.join(HERE, "results", "limits.jsonl")])
    rp.add_argument("--last-only", action="store_true", help="only the newest run of each peer")
    rp.add_argument("--include-untick", action="store_true", help="also latency runs made before --tick-ms existed")
    a = ap.parse_args(argv)
    if a.cmd == "run":
        for p in a.peers:
            run_peer(p, a)
    elif a.cmd == "limits":
        run_limits(a)
    elif a.cmd == "report":
        report(a)


if __name__ == "__main__":
    main()
