#!/usr/bin/env bash
# Make sure Debian's chromium and its chromedriver are there for the dashboard's browser tests
# (tests/dashboard/test_dashboard_browser.py drives a headless chromium with Selenium): do nothing when
# `chromium` and `chromedriver` are on PATH, else install the packages chromium and chromium-driver. Needs root
# (or sudo) and the Debian archive; used by `make test`. Without them those tests skip, saying why.
set -euo pipefail

if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
    echo "ensure_chromium: $(chromium --version 2>/dev/null | head -n 1) and chromedriver found"
    exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
        echo "ensure_chromium: chromium is missing and this user cannot install packages; the dashboard browser tests will skip" >&2
        exit 0
    fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
echo "ensure_chromium: installing chromium chromium-driver"
$SUDO apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
    echo "ensure_chromium: installed chromium and chromium-driver but chromium or chromedriver is still not on PATH" >&2
    exit 1
fi
echo "ensure_chromium: $(chromium --version 2>/dev/null | head -n 1) ready"
