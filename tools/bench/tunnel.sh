#!/usr/bin/env bash
# Bulk tunnels: proxy CPU per GB and the rate, for sluice with splice (the default), sluice
# copying through user space (limits.disable_splice), and Squid, in one run. The proxy under
# test gets core 0 alone (one worker); sluice-origin (sink, source, WebSocket echo) and
# sluice-load share core 1. "CPU" is the proxy's user+system time from /proc/<pid>/stat.
#
#   tools/bench/tunnel.sh [--gb 2] [--connections 1] [--only NAME[,NAME...]] [--cpu-quota PCT]
#
# "peers' core" is core 1's busy time per GB (or per request) and how much of sluice-load's run
# it was busy: near 100%, the peers bound the rate, not the proxy. --cpu-quota PCT puts each
# proxy in a cgroup of its own that may use PCT% of one core (the cpu controller, v2 or v1;
# needs root), so the proxy bounds the rate: the rate a proxy sustains on a CPU budget, as
# under a container's CPU limit.
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
QUOTA=""
while [ $# -gt 0 ]; do
  case "$1" in
    --gb) GB=$2; shift 2 ;;
    --connections) CONNS=$2; shift 2 ;;
    --only) ONLY=",$2,"; shift 2 ;;
    --cpu-quota) QUOTA=$2; shift 2 ;;
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

# cpu_cgroup NAME PID...: a cgroup allowed $QUOTA% of one core (10 ms periods), holding PIDs.
CGROUPS=()
cpu_cgroup() {
  local name=$1 dir p
  shift
  if grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
    # cgroup v2: the children of the root get the cpu controller only once it is delegated.
    grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control ||
      echo +cpu >/sys/fs/cgroup/cgroup.subtree_control
    dir=/sys/fs/cgroup/sluice-bench-$name-$$
    mkdir "$dir"
    echo "$((QUOTA * 100)) 10000" >"$dir/cpu.max"
  elif [ -d /sys/fs/cgroup/cpu ]; then
    dir=/sys/fs/cgroup/cpu/sluice-bench-$name-$$
    mkdir "$dir"
    echo 10000 >"$dir/cpu.cfs_period_us"
    echo $((QUOTA * 100)) >"$dir/cpu.cfs_quota_us"
  else
    echo "--cpu-quota: no cgroup cpu controller here" >&2
    exit 1
  fi
  CGROUPS+=("$dir")
  for p in "$@"; do echo "$p" >"$dir/cgroup.procs"; done
}
cgroups_cleanup() {
  local d i
  bench_cleanup
  # A cgroup goes once its last process has exited (Squid takes a moment).
  for d in "${CGROUPS[@]}"; do
    for i in 1 2 3 4 5 6 7 8 9 10; do rmdir "$d" 2>/dev/null && break; sleep 0.5; done
  done
}
if [ -n "$QUOTA" ]; then
  trap cgroups_cleanup EXIT
  cpu_cgroup splice $(splice_pids)
  cpu_cgroup copy $(copy_pids)
  [ $HAVE_SQUID = 1 ] && cpu_cgroup squid $(squid_pids)
fi
# core1_ticks: busy clock ticks of core 1, where the peers run (everything but idle and iowait).
core1_ticks() { awk '$1 == "cpu1" {print $2 + $3 + $4 + $7 + $8 + $9}' /proc/stat; }

HZ=$(getconf CLK_TCK)
BYTES=$((GB * 1024 * 1024 * 1024))
PER=$((BYTES / 8))
ROWS=()
measure() {  # name unit pids-command -- sluice-load args...
  local name=$1 unit=$2 pids_cmd=$3
  shift 4
  taskset -c 1 "$LOAD" -q -n 2 "$@" >/dev/null 2>&1 || true  # warm up
  local t0 t1 p0 p1 w0 w1 pids
  pids=$($pids_cmd)
  t0=$(cpu_ticks $pids)
  p0=$(core1_ticks)
  w0=$(date +%s%N)
  taskset -c 1 "$LOAD" -q --json "$@" >"$WORK/run.json" || true
  w1=$(date +%s%N)
  t1=$(cpu_ticks $pids)
  p1=$(core1_ticks)
  ROWS+=("$(python3 - "$name" "$unit" $((t1 - t0)) $((p1 - p0)) $((w1 - w0)) "$HZ" "$WORK/run.json" <<'PY'
import json, sys
name, unit = sys.argv[1], sys.argv[2]
ticks, peer_ticks, wall_ns, hz = (int(a) for a in sys.argv[3:7])
try:
    r = json.load(open(sys.argv[7]))
except ValueError:
    print(f"| {name} | — | — | — | failed to run |")
    sys.exit()
cpu = ticks / hz
peers = peer_ticks / hz
failed = r["failed"] + r.get("incomplete", 0)
# Busy over sluice-load's whole run (its setup included), so 100% means core 1 never waited.
busy = f"{100 * peers * 1e9 / wall_ns:.0f}%" if wall_ns else "n/a"
if unit == "GB":
    gb = (r["payload_bytes_sent"] + r["payload_bytes_read"]) / 1e9
    per = f"{cpu / gb:.3f} s/GB" if gb else "n/a"
    peer = f"{peers / gb:.3f} s/GB ({busy})" if gb else "n/a"
    rate = f"{gb * 8 / r['elapsed_s']:.1f} Gbit/s"
else:
    per = f"{cpu * 1e6 / r['ok']:.1f} µs/req" if r["ok"] else "n/a"
    peer = f"{peers * 1e6 / r['ok']:.1f} µs/req ({busy})" if r["ok"] else "n/a"
    rate = f"{r['requests_per_s']:.0f} req/s"
print(f"| {name} | {per} | {rate} | {peer} | {failed} |")
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

echo "| proxy: scenario | proxy CPU | rate | peers' core | failed |"
echo "| --- | --- | --- | --- | --- |"
printf '%s\n' "${ROWS[@]}"
echo
echo "(${GB} GiB per bulk row, $CONNS connection(s); proxies on core 0 (1 worker), sluice-load and sluice-origin on core 1${QUOTA:+; each proxy limited to $QUOTA% of a core})"
# What the kernel does per segment depends on it (BBR without the fq qdisc paces with a timer).
echo "(TCP congestion control: $(sysctl -n net.ipv4.tcp_congestion_control), qdisc: $(sysctl -n net.core.default_qdisc))"
spliced=$(curl -s "http://127.0.0.1:$ADMIN_PORT/stats?filter=tunnel.listener" | grep bytes_spliced | awk '{s += $2} END {print s + 0}')
echo "(sluice with splice: $spliced bytes spliced)"
