#!/usr/bin/env bash
# Installs the Debian 12 packages sluice needs to build (and, with --test, to run its tests).
# Idempotent: asks dpkg first and touches apt only when something is missing.
set -euo pipefail

usage() {
  echo "usage: tools/deps.sh [--test] [--bench]" >&2
  echo "  --test   also install what tools/test.sh needs (curl, nginx, wrk, pytest, clang, ...)" >&2
  echo "  --bench  also install the peers the benchmarks and tools/campaign/run measure" >&2
  echo "           (nginx, Squid, Tinyproxy, Dante, microsocks, wrk, matplotlib for the report)" >&2
}

want_test=0
want_bench=0
for arg in "$@"; do
  case "$arg" in
    --test) want_test=1 ;;
    --bench) want_bench=1 ;;
    -h|--help) usage; exit 0 ;;
    *) usage; exit 2 ;;
  esac
done

build_pkgs=(
  bazel-bootstrap bazel-platforms libevent-dev android-libboringssl-dev libnghttp2-dev
  libprotobuf-dev protobuf-compiler libabsl-dev libgtest-dev libgmock-dev libbenchmark-dev
  libyaml-cpp-dev libsystemd-dev liburing-dev
)
# python3-yaml lets the integration tests edit the full form printed by `sluice config expand`;
# libclang-rt-14-dev holds libFuzzer and the sanitizer runtimes for the fuzz build; calamaris
# (a Squid log analyser) reads the access log in its squid format; haproxy fronts sluice with
# the PROXY protocol (where systemd runs, its package starts a server on port 80 it does not
# need: `systemctl disable --now haproxy`); prometheus is the only
# package with promtool, which checks /stats/prometheus (where systemd runs, the package also
# starts a Prometheus server: `systemctl disable --now prometheus`). tinyproxy, microsocks and
# python3-matplotlib are for the campaign's smoke test (tools/campaign/run --quick: two more peers
# and the report's charts; where systemd runs, tinyproxy's package starts one on port 8888:
# `systemctl disable --now tinyproxy`).
test_pkgs=(
  curl nginx-light wrk python3-pytest python3-requests python3-yaml openssl clang libclang-rt-14-dev
  python3-prometheus-client prometheus python3-h2 python3-websocket python3-socks python3-python-socks
  nghttp2-client chromium
  libnss3-tools
  squid dante-server haproxy
  calamaris
  tinyproxy microsocks python3-matplotlib
)

bench_pkgs=(curl nginx-light squid wrk openssl dante-server tinyproxy microsocks python3-matplotlib)

pkgs=("${build_pkgs[@]}")
if [[ $want_test == 1 ]]; then
  pkgs+=("${test_pkgs[@]}")
fi
if [[ $want_bench == 1 ]]; then
  pkgs+=("${bench_pkgs[@]}")
fi

is_installed() {
  [[ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" == "install ok installed" ]]
}

missing=()
for p in "${pkgs[@]}"; do
  is_installed "$p" || missing+=("$p")
done

if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi

if [[ $(id -u) -ne 0 ]]; then
  echo "deps: missing Debian packages: ${missing[*]}" >&2
  echo "deps: run as root:" >&2
  echo "  apt-get update && apt-get install -y --no-install-recommends ${missing[*]}" >&2
  exit 1
fi

echo "deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}"; } \
    >"$log" 2>&1; then
  cat "$log" >&2
  echo "deps: apt-get failed" >&2
  exit 1
fi

for p in "${missing[@]}"; do
  if ! is_installed "$p"; then
    echo "deps: $p did not install" >&2
    exit 1
  fi
done
echo "deps: done" >&2
