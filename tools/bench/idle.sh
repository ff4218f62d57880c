#!/usr/bin/env bash
# Memory per idle tunnel, per protocol: a fresh sluice (1 worker) per mode, N tunnels opened by
# sluice-load --hold to sluice-origin's TCP sink and left idle; the figure is sluice's RSS growth
# divided by N, right after they opened (all at once, or W at a time with --window: the heap still
# holds what their handshakes used), after the next memory_release_interval (10 s: free heap goes
# back) and after the one following it (a worker's caches of free objects, and its slab chunks left
# empty, go back once they stayed unused for a whole interval, so what the burst left in them goes
# at the second release after it). Each tunnel holds a client connection and an origin connection
# in sluice.
#
#   tools/bench/idle.sh [N [--window W]]   (N default 4000; sluice needs 2N descriptors, under the
#                                          limit; --window W: sluice-load --hold-window W)
#
# The "just opened" figure is read once all N are established at the sink (or when no more have
# been for 5 s), the others 11 s and 21 s later.
# IDLE_MODES: the rows to run, of "plain tls h2 socks5" (default all four).
# Ports: IDLE_PORT_BASE+1 to +6 (IDLE_PORT_BASE defaults to 18400). Needs a built sluice,
# sluice-load and sluice-origin. Prints a markdown table.
set -euo pipefail
cd "$(dirname "$0")/../.."

N=${1:-4000}
WINDOW=
if [ $# -gt 1 ]; then
  if [ "$2" != --window ] || [ $# -ne 3 ] || ! [[ $3 =~ ^[1-9][0-9]*$ ]]; then
    echo "usage: tools/bench/idle.sh [N [--window W]]" >&2
    exit 2
  fi
  WINDOW=$3
fi
HOLD_ARGS=(--hold "$N")
[ -z "$WINDOW" ] || HOLD_ARGS+=(--hold-window "$WINDOW")
BASE=${IDLE_PORT_BASE:-18400}
. tools/bench/lib.sh
bench_require_binaries
ulimit -n 20000
bench_workdir idle
ORIGIN_PORT=$((BASE + 1)) SINK_PORT=$((BASE + 2))
bench_sluice_config "$BASE"
"$ORIGIN" --listen 127.0.0.1:$ORIGIN_PORT --sink 127.0.0.1:$SINK_PORT >"$WORK/origin.log" 2>&1 &
PIDS+=($!)

rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
# Connections in ESTABLISHED whose local port is $1 (the sink's side of each tunnel).
established_at() {
  awk -v port="$(printf ':%04X' "$1")" '$4 == "01" && substr($2, length($2) - 4) == port' \
    /proc/net/tcp | wc -l
}
ROWS=()
measure() {  # name -- sluice-load proxy args...
  local name=$1
  shift 2
  "$SLUICE" run -c "$WORK/sluice.yaml" >"$WORK/sluice.log" 2>&1 &
  local sp=$!
  sleep 1
  # One tunnel first, so one-time allocations (TLS contexts, pools) are not counted.
  "$LOAD" -q --hold 1 -d 2s --dst "tcp://127.0.0.1:$SINK_PORT" "$@" >/dev/null 2>&1 || true
  local before opened settled held
  before=$(rss_kib $sp)
  "$LOAD" -q --json "${HOLD_ARGS[@]}" -d 300s --dst "tcp://127.0.0.1:$SINK_PORT" "$@" \
    >"$WORK/hold.json" &
  local lp=$!
  local n last=-1 still=0
  for _ in $(seq 600); do  # at most 60 s
    sleep 0.1
    n=$(established_at "$SINK_PORT")
    [ "$n" -ge "$N" ] && break
    if [ "$n" = "$last" ]; then still=$((still + 1)); else still=0; last=$n; fi
    [ $still -ge 50 ] && break
  done
  sleep 0.5
  opened=$(rss_kib $sp)
  # After memory_release_interval (10 s): the free heap opening them left behind has gone back.
  sleep 11
  settled=$(rss_kib $sp)
  # After the next one: the caches and slab chunks their burst left unused have gone back too.
  sleep 10
  released=$(rss_kib $sp)
  kill -INT $lp
  wait $lp || true
  held=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["held"])' "$WORK/hold.json")
  kill $sp
  wait $sp 2>/dev/null || true
  ROWS+=("$(awk -v n="$name" -v b="$before" -v o="$opened" -v a="$settled" -v r="$released" \
    -v h="$held" 'BEGIN {printf "| %s | %d | %.2f KB | %.2f KB | %.2f KB |", n, h,
                         (o - b) * 1024 / h / 1000, (a - b) * 1024 / h / 1000,
                         (r - b) * 1024 / h / 1000}')")
}

MODES=" ${IDLE_MODES:-plain tls h2 socks5} "
for m in $MODES; do
  case $m in plain | tls | h2 | socks5) ;; *) echo "IDLE_MODES: unknown row $m" >&2; exit 2 ;; esac
done
[[ $MODES == *" plain "* ]] &&
  measure "HTTP CONNECT (plain port)" -- --proxy "http://u:$KEY@127.0.0.1:$SLUICE_PORT"
[[ $MODES == *" tls "* ]] &&
  measure "HTTP CONNECT over TLS" -- --proxy "https://u:$KEY@127.0.0.1:$TLS_PORT" \
    --proxy-ca "$WORK/certs/ca.pem"
[[ $MODES == *" h2 "* ]] &&
  measure "HTTP/2 CONNECT streams (100 per connection)" -- \
    --proxy "h2://u:$KEY@127.0.0.1:$TLS_PORT" --proxy-ca "$WORK/certs/ca.pem"
[[ $MODES == *" socks5 "* ]] &&
  measure "SOCKS5 CONNECT" -- --proxy "socks5://u:$KEY@127.0.0.1:$SOCKS_PORT"

if [ -n "$WINDOW" ]; then OPENED="$WINDOW at a time"; else OPENED="all at once"; fi
echo "| tunnel ($N opened $OPENED) | held | sluice RSS per tunnel, just opened | after a memory release | after two |"
echo "| --- | --- | --- | --- | --- |"
printf '%s\n' "${ROWS[@]}"
