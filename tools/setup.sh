#!/usr/bin/env bash
# Installs the build dependencies (Debian packages) and builds deepinfer's CPU configuration into build-cpu/.
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs=(cmake g++ pkg-config nlohmann-json3-dev libcli11-dev libfmt-dev libpcre2-dev libcpp-httplib-dev libgtest-dev python3 python3-pip
      clang-format)  # clang-format: the format test (tools/check_format.sh)
optional=(libedit-dev)  # line editing in `chat`; the build works without it
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
opt_missing=()
for p in "${optional[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || opt_missing+=("$p"); done
if ((${#missing[@]} + ${#opt_missing[@]})); then
    sudo_cmd=""; [[ $(id -u) -ne 0 ]] && sudo_cmd="sudo"
    $sudo_cmd apt-get update -q || true
    if ((${#missing[@]})); then DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q "${missing[@]}"; fi
    if ((${#opt_missing[@]})); then
        DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q "${opt_missing[@]}" ||
            echo "setup: could not install ${opt_missing[*]}; chat reads plain lines"
    fi
fi
# The e2e tests drive `deepinfer serve` with the official openai and anthropic clients (PyPI). Offline this
# step fails softly and those tests report "skipped".
for py in openai anthropic; do
    if ! python3 -c "import $py" >/dev/null 2>&1; then
        python3 -m pip install -q "$py" >/dev/null 2>&1 || python3 -m pip install -q --break-system-packages "$py" \
            >/dev/null 2>&1 || echo "setup: could not install the $py Python package; its e2e tests will be skipped"
    fi
done
cmake --preset cpu >/dev/null
cmake --build build-cpu -j"$(nproc)"
