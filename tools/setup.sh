#!/usr/bin/env bash
# Installs the build dependencies (Debian packages) and builds deepinfer's CPU configuration into build-cpu/.
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs=(cmake g++ pkg-config nlohmann-json3-dev libcli11-dev libfmt-dev libpcre2-dev libcpp-httplib-dev
      libgtest-dev libgmock-dev libbenchmark-dev python3)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then
    sudo_cmd=""; [[ $(id -u) -ne 0 ]] && sudo_cmd="sudo"
    $sudo_cmd apt-get update -q
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q "${missing[@]}"
fi
cmake --preset cpu >/dev/null
cmake --build build-cpu -j"$(nproc)"
