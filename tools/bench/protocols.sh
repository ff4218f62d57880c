#!/usr/bin/env bash
# CPU per request of sluice over each protocol it serves, in one run, beside Dante for SOCKS5.
# The proxy under test gets core 0 alone; sluice-load and sluice-origin share core 1. "CPU" is
# the proxy's own user+system time (from /proc/<pid>/stat, all of its processes) divided by
# the requests (or messages, or bytes) sluice-load counted.
#
#   tools/bench/protocols.sh [--duration 10] [--connections 32] [--only NAME[,NAME...]] [--ecdsa]
#
# --ecdsa: the TLS port's certificate has an ECDSA P-256 key instead of RSA 2048.
#
# Scenarios (NAME):
#   http       HTTP/1.1 keep-alive, absolute-form GET of 1 KiB, plain port
#   tls        the same over the TLS port (HTTP/1.1 inside TLS)
#   tls-resume a new TLS connection per request, session resumed (tickets)
#   tls-full   a new TLS connection per request, full handshake (RSA 2048 certificate)
#   h2         HTTP/2 over TLS: the -c requests are streams of one connection
#   socks5     SOCKS5 CONNECT (username/password), then keep-alive GETs of 1 KiB in the tunnel
#   socks5-new a new SOCKS5 connection and handshake per GET
#   socks5-gb  tunnel throughput: 64 MiB per request to sluice-origin's sink; CPU per GB
#   ws         WebSocket echo of 64-byte messages (absolute-form upgrade), rate and p99
#   dante*     the socks5 scenarios against Dante (danted, socksmethod username; and none)
#
# Needs: a built sluice, sluice-load and sluice-origin (bazel build //:sluice //:sluice-load
# //:sluice-origin), openssl, and for Dante dante-server with root (it checks a test user in a
# private mount namespace; tools/deps.sh --test installs it). Prints a markdown table.
set -euo pipefail
cd "$(dirname "$0")/../.."

DURATION=10
CONNS=32
ONLY=""
while [ $# -gt 0 ]; do
  case "$1" in
    --duration) DURATION=$2; shift 2 ;;
    --connections) CONNS=$2; shift 2 ;;
    --only) ONLY=",$2,"; shift 2 ;;
    --ecdsa) export SLUICE_TEST_CERT_KEY=ec; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
want() { [ -z "$ONLY" ] || [[ "$ONLY" == *",$1,"* ]]; }

. tools/bench/lib.sh
bench_require_binaries
bench_workdir protocols
ORIGIN_PORT=18301 SINK_PORT=18302 DANTE_PORT=18307 DANTE_NONE_PORT=18308
bench_sluice_config 18300

taskset -c 1 "$ORIGIN" --listen 127.0.0.1:$ORIGIN_PORT --sink 127.0.0.1:$SINK_PORT -t 1 \
  >"$WORK/origin.log" 2>&1 &
PIDS+=($!)

taskset -c 0 "$SLUICE" run -c "$WORK/sluice.yaml" >"$WORK/sluice.log" 2>&1 &
SLUICE_PID=$!
PIDS+=($SLUICE_PID)

# Dante (its configuration and the test user: bench_dante_config, bench_dante_exec in lib.sh).
start_dante() {  # method port
  local method=$1 port=$2 dir="$WORK/dante-$1"
  bench_dante_config "$dir" "$method" "$port"
  taskset -c 0 bash -c '. tools/bench/lib.sh; bench_dante_exec "$@"' sh "$dir" "$method" "$KEY" \
    >/dev/null 2>&1 &
  PIDS+=($!)
}
HAVE_DANTE=0
if [ -x /usr/sbin/danted ] && [ "$(id -u)" = 0 ] && { want dante || want dante-new || want dante-gb || want dante-none-new; }; then
  start_dante username $DANTE_PORT
  start_dante none $DANTE_NONE_PORT
  HAVE_DANTE=1
fi
sleep 1.5
# Every danted process: the main one (its pid file) and the workers it forks, which rename
# themselves (setproctitle), so they are found by parentage.
descendants() {  # pid -> it and all its descendants
  local p=$1 c
  echo "$p"
  for c in $(pgrep -P "$p" || true); do descendants "$c"; done
}
dante_pids() { descendants "$(cat "$WORK/dante-$1/danted.pid")" | tr '\n' ' '; }
dante_username_pids() { dante_pids username; }
dante_none_pids() { dante_pids none; }
sluice_pids() { echo "$SLUICE_PID"; }

HZ=$(getconf CLK_TCK)

ROWS=()
measure() {  # name unit pids-command -- sluice-load args...
  local name=$1 unit=$2 pids_cmd=$3
  shift 4
  taskset -c 1 "$LOAD" -q -d 2s "$@" >/dev/null 2>&1 || true  # warm up
  # After the warm-up: Dante forks its worker processes on demand.
  local t0 t1 pids
  pids=$($pids_cmd)
  t0=$(cpu_ticks $pids)
  taskset -c 1 "$LOAD" -q --json -d "${DURATION}s" "$@" >"$WORK/run.json"
  t1=$(cpu_ticks $pids)
  ROWS+=("$(python3 - "$name" "$unit" $((t1 - t0)) "$HZ" "$WORK/run.json" <<'PY'
import json, sys
name, unit, ticks, hz = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
r = json.load(open(sys.argv[5]))
cpu = ticks / hz
lat = r["latency"]
failed = r["failed"] + r.get("incomplete", 0)
if unit == "GB":
    gb = (r["payload_bytes_sent"] + r["payload_bytes_read"]) / 1e9
    per = f"{cpu / gb:.2f} s/GB" if gb else "n/a"
    rate = f"{gb * 8 / r['elapsed_s']:.1f} Gbit/s"
else:
    per = f"{cpu * 1e6 / r['ok']:.1f} µs" if r["ok"] else "n/a"
    rate = f"{r['requests_per_s']:.0f}/s"
print(f"| {name} | {per} | {rate} | {lat['p50_us']:.0f} | {lat['p99_us']:.0f} | {failed} |")
PY
)")
}

HTTP_URL=http://127.0.0.1:$ORIGIN_PORT/bytes/1024
SINK=tcp://127.0.0.1:$SINK_PORT
C=(-c "$CONNS")
want http && measure http req sluice_pids -- "${C[@]}" --dst "$HTTP_URL" \
  --proxy "http://u:$KEY@127.0.0.1:$SLUICE_PORT"
want tls && measure tls req sluice_pids -- "${C[@]}" --dst "$HTTP_URL" \
  --proxy "https://u:$KEY@127.0.0.1:$TLS_PORT" --proxy-ca "$WORK/certs/ca.pem"
want tls-resume && measure tls-resume req sluice_pids -- "${C[@]}" --dst "$HTTP_URL" \
  --proxy "https://u:$KEY@127.0.0.1:$TLS_PORT" --proxy-ca "$WORK/certs/ca.pem" --new-conn
want tls-full && measure tls-full req sluice_pids -- "${C[@]}" --dst "$HTTP_URL" \
  --proxy "https://u:$KEY@127.0.0.1:$TLS_PORT" --proxy-ca "$WORK/certs/ca.pem" --new-conn \
  --no-resume
want h2 && measure h2 req sluice_pids -- "${C[@]}" --dst "$HTTP_URL" \
  --proxy "h2://u:$KEY@127.0.0.1:$TLS_PORT" --proxy-ca "$WORK/certs/ca.pem"
want socks5 && measure socks5 req sluice_pids -- "${C[@]}" --dst "$HTTP_URL" \
  --proxy "socks5://u:$KEY@127.0.0.1:$SOCKS_PORT"
want socks5-new && measure socks5-new req sluice_pids -- "${C[@]}" --dst "$HTTP_URL" \
  --proxy "socks5://u:$KEY@127.0.0.1:$SOCKS_PORT" --new-conn
want socks5-gb && measure socks5-gb GB sluice_pids -- -c 4 --dst "$SINK" \
  --proxy "socks5://u:$KEY@127.0.0.1:$SOCKS_PORT" --tunnel-bytes $((64 << 20))
want ws && measure ws req sluice_pids -- "${C[@]}" --dst "ws://127.0.0.1:$ORIGIN_PORT/ws" \
  --proxy "http://u:$KEY@127.0.0.1:$SLUICE_PORT" --ws --ws-size 64
if [ $HAVE_DANTE = 1 ]; then
  want dante && measure dante req dante_username_pids -- "${C[@]}" --dst "$HTTP_URL" \
    --proxy "socks5://sluicebench:$KEY@127.0.0.1:$DANTE_PORT"
  want dante-new && measure dante-new req dante_username_pids -- "${C[@]}" --dst "$HTTP_URL" \
    --proxy "socks5://sluicebench:$KEY@127.0.0.1:$DANTE_PORT" --new-conn
  want dante-none-new && measure dante-none-new req dante_none_pids -- "${C[@]}" --dst "$HTTP_URL" \
    --proxy "socks5://127.0.0.1:$DANTE_NONE_PORT" --new-conn
  want dante-gb && measure dante-gb GB dante_username_pids -- -c 4 --dst "$SINK" \
    --proxy "socks5://sluicebench:$KEY@127.0.0.1:$DANTE_PORT" --tunnel-bytes $((64 << 20))
fi

echo "| scenario | proxy CPU per request (or per GB) | rate | p50 µs | p99 µs | failed |"
echo "| --- | --- | --- | --- | --- | --- |"
printf '%s\n' "${ROWS[@]}"
echo
echo "($DURATION s each after a 2 s warm-up, $CONNS connections, 1 KiB responses; sluice: 1 worker on core 0)"
