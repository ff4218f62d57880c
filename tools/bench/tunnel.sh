#!/usr/bin/env bash
# Bulk tunnels: proxy CPU per GB and the rate, for sluice with splice (the default), sluice
# copying through user space (limits.disable_splice), and Squid, in one run. The proxy under
# test gets core 0 alone (one worker); sluice-origin (sink, source, WebSocket echo) and
# sluice-load share core 1. "CPU" is the proxy's user+system time from /proc/<pid>/stat.
#
#   tools/bench/tunnel.sh [--gb 2] [--connections 1] [--only NAME[,NAME...]]
#
# Scenarios (NAME), each moving --gb gigabytes per proxy:
#   connect-up    HTTP CONNECT, client → sink (the sink acknowledges each transfer)
#   connect-down  HTTP CONNECT, source → client
#   socks5-up     SOCKS5 CONNECT (username/password), client → sink
#   ws-up         WebSocket after an HTTP/1.1 upgrade (absolute-form ws://), client → origin,
#                 8 messages of --gb/8 (sluice-origin's /ws/sink acknowledges each with an
#                 empty one), as CONNECT up's 8 transfers
#   ws            WebSocket after an HTTP/1.1 upgrade, 1 MiB messages echoed by sluice-origin
#                 (the bytes both ways count)
#   small         HTTP CONNECT, keep-alive 1 KiB GETs inside the tunnel (CPU per request: where
#                 the copy path is kept, below kSpliceAfterRead)
#
# Needs: a built sluice, sluice-load and sluice-origin, and squid (tools/deps.sh --test).
set -euo pipefail
cd "$(dirname "$0")/../.."

GB=2
CONNS=1
ONLY=""
while [ $# -gt 0 ]; do
  case "$1" in
    --gb) GB=$2; shift 2 ;;
    --connections) CONNS=$2; shift 2 ;;
    --only) ONLY=",$2,"; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
want() { [ -z "$ONLY" ] || [[ "$ONLY" == *",$1,"* ]]; }

. tools/bench/lib.sh
bench_require_binaries
bench_workdir tunnel
ORIGIN_PORT=18401 SINK_PORT=18402 SOURCE_PORT=18408 SQUID_PORT=18409
bench_sluice_config 18400
sed 's/^limits: {/limits: {disable_splice: true, /; s/1840\([3-6]\)/1841\1/g' "$WORK/sluice.yaml" \
  >"$WORK/copy.yaml"
COPY_PORT=18413 COPY_SOCKS_PORT=18415

taskset -c 1 "$ORIGIN" --listen 127.0.0.1:$ORIGIN_PORT --sink 127.0.0.1:$SINK_PORT \
  --source 127.0.0.1:$SOURCE_PORT -t 1 >"$WORK/origin.log" 2>&1 &
PIDS+=($!)
taskset -c 0 "$SLUICE" run -c "$WORK/sluice.yaml" >"$WORK/sluice.log" 2>&1 &
SPLICE_PID=$!
PIDS+=($SPLICE_PID)
taskset -c 0 "$SLUICE" run -c "$WORK/copy.yaml" >"$WORK/copy.log" 2>&1 &
COPY_PID=$!
PIDS+=($COPY_PID)

HAVE_SQUID=0
if command -v squid >/dev/null; then
  chmod 755 "$WORK"
  bench_squid_config "$WORK/squid" "$SQUID_PORT" "$KEY"
  taskset -c 0 squid -f "$WORK/squid/squid.conf" -N 2>"$WORK/squid/stderr" &
  PIDS+=($!)
  HAVE_SQUID=1
fi
sleep 1.5
squid_pids() { pgrep -f "squid -f $WORK/squid/squid.conf" | tr '\n' ' '; }
splice_pids() { echo "$SPLICE_PID"; }
copy_pids() { echo "$COPY_PID"; }

HZ=$(getconf CLK_TCK)
BYTES=$((GB * 1024 * 1024 * 1024))
PER=$((BYTES / 8))
ROWS=()
measure() {  # name unit pids-command -- sluice-load args...
  local name=$1 unit=$2 pids_cmd=$3
  shift 4
  taskset -c 1 "$LOAD" -q -n 2 "$@" >/dev/null 2>&1 || true  # warm up
  local t0 t1 pids
  pids=$($pids_cmd)
  t0=$(cpu_ticks $pids)
  taskset -c 1 "$LOAD" -q --json "$@" >"$WORK/run.json" || true
  t1=$(cpu_ticks $pids)
  ROWS+=("$(python3 - "$name" "$unit" $((t1 - t0)) "$HZ" "$WORK/run.json" <<'PY'
import json, sys
name, unit, ticks, hz = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
try:
    r = json.load(open(sys.argv[5]))
except ValueError:
    print(f"| {name} | — | — | failed to run |")
    sys.exit()
cpu = ticks / hz
failed = r["failed"] + r.get("incomplete", 0)
if unit == "GB":
    gb = (r["payload_bytes_sent"] + r["payload_bytes_read"]) / 1e9
    per = f"{cpu / gb:.3f} s/GB" if gb else "n/a"
    rate = f"{gb * 8 / r['elapsed_s']:.1f} Gbit/s"
else:
    per = f"{cpu * 1e6 / r['ok']:.1f} µs/req" if r["ok"] else "n/a"
    rate = f"{r['requests_per_s']:.0f} req/s"
print(f"| {name} | {per} | {rate} | {failed} |")
PY
)")
}

C=(-c "$CONNS")
SINK=tcp://127.0.0.1:$SINK_PORT
SOURCE=tcp://127.0.0.1:$SOURCE_PORT
WS=ws://127.0.0.1:$ORIGIN_PORT/ws
SMALL=http://127.0.0.1:$ORIGIN_PORT/bytes/1024
run_proxy() {  # label pids-command http-proxy socks-proxy
  local label=$1 pids=$2 http=$3 socks=$4
  want connect-up && measure "$label: CONNECT up" GB "$pids" -- "${C[@]}" -n 8 --dst "$SINK" \
    --proxy "$http" --tunnel-bytes $PER
  want connect-down && measure "$label: CONNECT down" GB "$pids" -- "${C[@]}" -n 8 \
    --dst "$SOURCE" --proxy "$http" --tunnel-bytes $PER --tunnel-dir down
  if [ -n "$socks" ] && want socks5-up; then
    measure "$label: SOCKS5 up" GB "$pids" -- "${C[@]}" -n 8 --dst "$SINK" --proxy "$socks" \
      --tunnel-bytes $PER
  fi
  want ws-up && measure "$label: WebSocket up" GB "$pids" -- "${C[@]}" \
    -n 8 --dst "$WS/sink" --proxy "$http" --ws-one-way --ws-size $PER
  want ws && measure "$label: WebSocket 1 MiB echo" GB "$pids" -- "${C[@]}" \
    -n $((BYTES / 2 / 1048576)) --dst "$WS" --proxy "$http" --ws --ws-size 1048576
  want small && measure "$label: 1 KiB GETs in a CONNECT tunnel" req "$pids" -- -c 32 -n 200000 \
    --dst "$SMALL" --proxy "$http" --connect
  return 0
}
run_proxy "sluice, splice" splice_pids "http://u:$KEY@127.0.0.1:$SLUICE_PORT" \
  "socks5://u:$KEY@127.0.0.1:$SOCKS_PORT"
run_proxy "sluice, copy" copy_pids "http://u:$KEY@127.0.0.1:$COPY_PORT" \
  "socks5://u:$KEY@127.0.0.1:$COPY_SOCKS_PORT"
[ $HAVE_SQUID = 1 ] && run_proxy "Squid 5.7" squid_pids "http://bench:$KEY@127.0.0.1:$SQUID_PORT" ""

echo "| proxy: scenario | proxy CPU | rate | failed |"
echo "| --- | --- | --- | --- |"
printf '%s\n' "${ROWS[@]}"
echo
echo "(${GB} GiB per bulk row, $CONNS connection(s); proxies on core 0 (1 worker), sluice-load and sluice-origin on core 1)"
# What the kernel does per segment depends on it (BBR without the fq qdisc paces with a timer).
echo "(TCP congestion control: $(sysctl -n net.ipv4.tcp_congestion_control), qdisc: $(sysctl -n net.core.default_qdisc))"
spliced=$(curl -s "http://127.0.0.1:$ADMIN_PORT/stats?filter=tunnel.listener" | grep bytes_spliced | awk '{s += $2} END {print s + 0}')
echo "(sluice with splice: $spliced bytes spliced)"
