#!/usr/bin/env bash
# Make sure FUSE 3 is usable for the power-loss test (tests/storage/test_power_loss.py, whose file system runs
# on mfusepy over libfuse3): do nothing when fusermount3 and libfuse3 are there, else install Debian's fuse3.
# Needs root (or sudo) and the Debian archive; used by `make test`. Without /dev/fuse (a container started
# without it) the package still installs and the test skips, saying why.
set -euo pipefail

have_fuse() {
    command -v fusermount3 >/dev/null 2>&1 && ldconfig -p 2>/dev/null | grep -q 'libfuse3\.so\.3'
}

if have_fuse; then
    echo "ensure_fuse: fusermount3 and libfuse3 found"
    exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
        echo "ensure_fuse: fuse3 is missing and this user cannot install packages; the power-loss test will skip" >&2
        exit 0
    fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
echo "ensure_fuse: installing fuse3"
$SUDO apt-get install -y -qq --no-install-recommends fuse3 >/dev/null
if ! have_fuse; then
    echo "ensure_fuse: installed fuse3 but fusermount3 or libfuse3 is still missing" >&2
    exit 1
fi
echo "ensure_fuse: fuse3 ready"
