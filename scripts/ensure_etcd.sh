#!/usr/bin/env bash
# Make sure an etcd server binary is there for the etcd metadata backend's tests (tests/metadata/test_etcd.py,
# the etcd runs of the port's contract tests) and the cluster tests: do nothing when `etcd` is on PATH, else
# install Debian's etcd-server (etcd v3.4). Needs root (or sudo) and the Debian archive; used by `make test`.
# Without it those tests skip, saying why.
set -euo pipefail

if command -v etcd >/dev/null 2>&1; then
    echo "ensure_etcd: $(etcd --version 2>/dev/null | head -n 1) found"
    exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
        echo "ensure_etcd: etcd is missing and this user cannot install packages; the etcd tests will skip" >&2
        exit 0
    fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
echo "ensure_etcd: installing etcd-server"
# the package starts an etcd service where systemd runs; the tests start their own on free ports
$SUDO apt-get install -y -qq --no-install-recommends etcd-server >/dev/null
if ! command -v etcd >/dev/null 2>&1; then
    echo "ensure_etcd: installed etcd-server but etcd is still not on PATH" >&2
    exit 1
fi
echo "ensure_etcd: $(etcd --version 2>/dev/null | head -n 1) ready"
