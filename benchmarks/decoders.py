"""The incremental decoders built on quasar.buffers.StreamBuffer, no sockets: ns per frame, best of 15 rounds.

Rows: FrameDecoder on 20,000 SEND frames (100 B payload) and on 20,000 PINGs, fed in 64 KiB chunks;
RemotingDecoder on 20,000 remoting commands; the HA SlaveSideDecoder on a HANDSHAKE and 20,000 1 KiB
TRANSFERs fed in 1 MiB chunks. Compare two source trees with ``PYTHONPATH=<tree>/src``, and
``QUASAR_PURE_PYTHON=1`` for the pure-Python twins. No test asserts on these figures.
"""

import time

from quasar.protocol import NEED_DATA, FrameDecoder, commands, requests
from quasar.protocol.frame import encode_headers_and_payload
from quasar.protocol.proto.PulsarApi_pb2 import MessageMetadata
from quasar.protocol.remoting import RemotingCommand, RemotingDecoder, encode_remoting_command
from quasar.replication.ha_protocol import (
    NEED_DATA as HA_NEED,
)
from quasar.replication.ha_protocol import (
    Handshake,
    HandshakeStatus,
    SlaveSideDecoder,
    Transfer,
    encode_handshake,
    encode_transfer,
)

N = 20000
meta = MessageMetadata(producer_name="p", sequence_id=1, publish_time=1)
hp = encode_headers_and_payload(meta, b"x" * 100)
sends = b"".join(requests.new_send(1, i, hp) for i in range(N))
pings = commands.new_ping() * N
rem = (
    encode_remoting_command(
        RemotingCommand(
            code=105,
            opaque=1,
            flag=0,
            language="PYTHON",
            version=1,
            remark=None,
            ext_fields={"a": "b"},
            body=b"y" * 64,
        )
    )
    * N
)
ha = encode_handshake(
    Handshake(status=HandshakeStatus.OK, master_epoch=1, max_offset=0, epochs=())
) + b"".join(
    encode_transfer(Transfer(offset=i * 1024, epoch=1, epoch_start=0, confirm_offset=0, body=b"z" * 1024))
    for i in range(N)
)


def run(make, data, next_name, need, chunk=65536, extra=0):
    best = 1e9
    for _ in range(15):
        d = make()
        nxt = getattr(d, next_name)
        count = 0
        t = time.perf_counter()
        for i in range(0, len(data), chunk):
            d.receive_data(data[i : i + chunk])
            while nxt() is not need:
                count += 1
        el = time.perf_counter() - t
        assert count == N + extra, count
        best = min(best, el)
    return best / N * 1e9


print(f"FrameDecoder SEND   {run(FrameDecoder, sends, 'next_frame', NEED_DATA):7.0f} ns/frame")
print(f"FrameDecoder PING   {run(FrameDecoder, pings, 'next_frame', NEED_DATA):7.0f} ns/frame")
print(f"RemotingDecoder     {run(RemotingDecoder, rem, 'next_command', NEED_DATA):7.0f} ns/frame")
ha_ns = run(SlaveSideDecoder, ha, "next_frame", HA_NEED, chunk=1 << 20, extra=1)
print(f"HA SlaveSideDecoder {ha_ns:7.0f} ns/frame (1 KiB transfers)")
