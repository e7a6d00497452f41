#!/usr/bin/env bash
# Idempotent set-up for a fresh machine: Debian packages the lab and tests use (when root on
# Debian), a virtual environment in .venv, and logquake installed into it. Safe to run twice.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(iptables iproute2 procps psmisc kcat faketime libfaketime fuse3 util-linux chromium docker.io openssh-server debootstrap)

install_debian_packages() {
    command -v apt-get >/dev/null 2>&1 || return 0
    [ "$(id -u)" = 0 ] || { echo "bootstrap: not root, skipping Debian packages (${APT_PACKAGES[*]})"; return 0; }
    local missing=()
    for p in "${APT_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    echo "bootstrap: installing Debian packages: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

install_python_env() {
    local py="${PYTHON:-python3}"
    [ -x .venv/bin/python ] || "$py" -m venv .venv
    local stamp=.venv/.logquake-installed
    local want
    want=$(sha256sum pyproject.toml | cut -d' ' -f1)
    if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
        echo "bootstrap: installing logquake and its dependencies into .venv"
        .venv/bin/python -m pip install -q --upgrade pip
        .venv/bin/python -m pip install -q -e '.[test]'
        echo "$want" > "$stamp"
    fi
}

install_debian_packages
install_python_env
