#!/usr/bin/env bash
# Make sure a Java runtime >= 17 is on PATH (PySpark 4 needs it): do nothing when one is, else install a
# headless JRE from Debian packages (openjdk-17, or the newest openjdk-N-jre-headless the archive offers).
# Needs root (or sudo) and the Debian archive; used by `make test` before the Spark tests.
set -euo pipefail

java_major() {
    # "openjdk version "17.0.15" ..." / "java version "1.8.0_..."" -> 17 / 8
    local version
    version=$(java -version 2>&1 | awk -F '"' '/version/ {print $2; exit}')
    case "$version" in
        1.*) echo "${version#1.}" | cut -d. -f1 ;;
        *) echo "$version" | cut -d. -f1 | cut -d- -f1 ;;
    esac
}

if command -v java >/dev/null 2>&1; then
    major=$(java_major || echo 0)
    if [ "${major:-0}" -ge 17 ] 2>/dev/null; then
        echo "ensure_java: java ${major} found at $(command -v java)"
        exit 0
    fi
    echo "ensure_java: java ${major:-?} is older than 17; installing a newer JRE"
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
        echo "ensure_java: java >= 17 is missing and this user cannot install packages (not root, no sudo)" >&2
        exit 1
    fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
package=""
for candidate in openjdk-17-jre-headless openjdk-21-jre-headless openjdk-25-jre-headless default-jre-headless; do
    if apt-cache policy "$candidate" 2>/dev/null | grep -q 'Candidate: [0-9]'; then
        package=$candidate
        break
    fi
done
if [ -z "$package" ]; then
    echo "ensure_java: no openjdk-(17|21|25)-jre-headless package in the apt sources" >&2
    exit 1
fi
echo "ensure_java: installing $package"
$SUDO apt-get install -y -qq --no-install-recommends "$package" >/dev/null
hash -r
major=$(java_major || echo 0)
if [ "${major:-0}" -lt 17 ] 2>/dev/null; then
    echo "ensure_java: installed $package but java on PATH is still ${major:-missing}" >&2
    exit 1
fi
echo "ensure_java: java ${major} ready"
