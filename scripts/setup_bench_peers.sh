#!/usr/bin/env bash
# Install what benchmarks/peers_compare.py needs on a fresh Debian (bookworm) machine, as root:
#   - the peer servers from Debian (redis-server, rabbitmq-server with Erlang, nats-server) and the tools
#     benchmarks/peers.py uses for its `limits` and verification runs (fio, iperf3, strace);
#   - a separate venv for the peers' Python clients and pulsar-client ($BENCH_VENV, default below);
#   - hdrhistogram in the project's .venv, for Quasar's own client under peers.py's `lat` workload
#     (peers.py runs Quasar's client with the project's interpreter).
# No system service is enabled or started: peers.py starts every server by hand on 127.0.0.1 and stops it by
# the PID it started. Safe to run again (apt and pip skip what is already there).
#
# Usage: sudo bash scripts/setup_bench_peers.sh        # from the project root
#        BENCH_VENV=/some/dir bash scripts/setup_bench_peers.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BENCH_VENV="${BENCH_VENV:-${XDG_DATA_HOME:-$HOME/.local/share}/quasar-bench/venv}"
PYTHON="${PYTHON:-python3}"

if [ "$(id -u)" -ne 0 ]; then
    echo "run as root (apt-get install)" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
# Debian's packages try to start their services; where a policy-rc.d refuses (containers) that is what we want,
# elsewhere stop them below so that their ports are free for peers.py (it refuses busy ports).
apt-get update -q
apt-get install -y -q --no-install-recommends \
    redis-server redis-tools rabbitmq-server erlang-base nats-server \
    fio iperf3 strace python3-venv
for svc in redis-server rabbitmq-server nats-server epmd; do
    if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet "$svc" 2>/dev/null; then
        echo "stopping and disabling the system service $svc (peers.py starts its own)"
        systemctl disable --now "$svc" || true
    fi
done

if [ ! -x "$BENCH_VENV/bin/python" ]; then
    mkdir -p "$(dirname "$BENCH_VENV")"
    "$PYTHON" -m venv "$BENCH_VENV"
fi
"$BENCH_VENV/bin/python" -m pip install -q --upgrade pip
# the peers' clients (peers.py README) and pulsar-client for Quasar with the official client
"$BENCH_VENV/bin/python" -m pip install -q \
    nats-py redis hiredis pika aio-pika rstream hdrhistogram uvloop pulsar-client

if [ -x "$ROOT/.venv/bin/python" ]; then
    "$ROOT/.venv/bin/python" -m pip install -q hdrhistogram
else
    echo "no $ROOT/.venv yet: run 'make bench' (or 'make run') once, then: .venv/bin/pip install hdrhistogram" >&2
fi

echo "peer servers:"
redis-server --version
dpkg-query -W -f='rabbitmq-server ${Version}\n' rabbitmq-server
nats-server --version || true
echo "bench venv: $BENCH_VENV (pass --bench-python $BENCH_VENV/bin/python or export BENCH_VENV)"
