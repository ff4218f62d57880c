#!/usr/bin/env bash
# sluice in front of a parent proxy against that parent alone: the CPU each proxy spends per
# 1 KiB request, Squid 5.7 as the parent (Basic auth, its bench configuration). Squid and
# sluice share core 0 (one worker each); sluice-load and sluice-origin share core 1.
#
#   tools/bench/parent.sh [--requests 20000] [--connections 64] [--runs 3]
#
# Rows, each run --runs times in turn:
#   Squid alone             sluice-load → Squid → origin
#   sluice → Squid          sluice-load → sluice (auth on, a route to the parent) → Squid → origin
#   sluice alone            sluice-load → the same sluice without the route → origin
#   ... with a CONNECT tunnel each  (--connect: one CONNECT per connection, GETs inside it)
# "CPU" is user+system time from /proc/<pid>/stat over the measured load, divided by the
# requests served; for "sluice → Squid" both proxies' shares and their sum are shown.
#
# Needs: a built sluice, sluice-load and sluice-origin, and squid (tools/deps.sh --test).
set -euo pipefail
cd "$(dirname "$0")/../.."

REQUESTS=20000
CONNS=64
RUNS=3
while [ $# -gt 0 ]; do
  case "$1" in
    --requests) REQUESTS=$2; shift 2 ;;
    --connections) CONNS=$2; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

. tools/bench/lib.sh
bench_require_binaries
command -v squid >/dev/null || { echo "needs squid (tools/deps.sh --test)" >&2; exit 1; }
bench_workdir parent
ORIGIN_PORT=18501 SQUID_PORT=18509
bench_sluice_config 18500
# The same sluice without the route, beside it (ports +10): what relaying costs it direct.
sed 's/1850\([3-6]\)/1851\1/g' "$WORK/sluice.yaml" >"$WORK/direct.yaml"
cat >>"$WORK/sluice.yaml" <<YAML
parents: [{name: squid, address: "127.0.0.1:$SQUID_PORT", protocol: http, username: bench,
           password: "$KEY"}]
routes: [{parents: [squid]}]
YAML

taskset -c 1 "$ORIGIN" --listen 127.0.0.1:$ORIGIN_PORT -t 1 >"$WORK/origin.log" 2>&1 &
PIDS+=($!)
chmod 755 "$WORK"
bench_squid_config "$WORK/squid" "$SQUID_PORT" "$KEY"
taskset -c 0 squid -f "$WORK/squid/squid.conf" -N 2>"$WORK/squid/stderr" &
PIDS+=($!)
taskset -c 0 "$SLUICE" run -c "$WORK/sluice.yaml" >"$WORK/sluice.log" 2>&1 &
SLUICE_PID=$!
PIDS+=($SLUICE_PID)
taskset -c 0 "$SLUICE" run -c "$WORK/direct.yaml" >"$WORK/direct.log" 2>&1 &
DIRECT_PID=$!
PIDS+=($DIRECT_PID)
sleep 1.5
SQUID_PIDS=$(pgrep -f "squid -f $WORK/squid/squid.conf" | tr '\n' ' ')
HZ=$(getconf CLK_TCK)
DST=http://127.0.0.1:$ORIGIN_PORT/bytes/1024

measure() {  # label proxy-url [sluice-load options...]: prints "label sluice_ticks squid_ticks ok failed"
  local label=$1 proxy=$2
  shift 2
  local sluice_pid=$SLUICE_PID
  [[ $label == direct* ]] && sluice_pid=$DIRECT_PID
  taskset -c 1 "$LOAD" -q -c "$CONNS" -n 500 --dst "$DST" --proxy "$proxy" "$@" >/dev/null 2>&1 || true
  local s0 q0 s1 q1
  s0=$(cpu_ticks "$sluice_pid") q0=$(cpu_ticks $SQUID_PIDS)
  taskset -c 1 "$LOAD" -q --json -c "$CONNS" -n "$REQUESTS" --dst "$DST" --proxy "$proxy" "$@" \
    >"$WORK/run.json" || true
  s1=$(cpu_ticks "$sluice_pid") q1=$(cpu_ticks $SQUID_PIDS)
  python3 - "$label" $((s1 - s0)) $((q1 - q0)) "$WORK/run.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[4]))
print(sys.argv[1], sys.argv[2], sys.argv[3], r["ok"], r["failed"] + r.get("incomplete", 0))
PY
}

: >"$WORK/rows"
for run in $(seq "$RUNS"); do
  echo "run $run of $RUNS" >&2
  measure squid "http://bench:$KEY@127.0.0.1:$SQUID_PORT" >>"$WORK/rows"
  measure chain "http://u:$KEY@127.0.0.1:$SLUICE_PORT" >>"$WORK/rows"
  measure direct "http://u:$KEY@127.0.0.1:$((SLUICE_PORT + 10))" >>"$WORK/rows"
  measure squid-connect "http://bench:$KEY@127.0.0.1:$SQUID_PORT" --connect >>"$WORK/rows"
  measure chain-connect "http://u:$KEY@127.0.0.1:$SLUICE_PORT" --connect >>"$WORK/rows"
done

STATS=$(curl -s "http://127.0.0.1:$ADMIN_PORT/stats?filter=upstream")
echo "(sluice: $(echo "$STATS" | awk '$1 == "upstream.cx_connect_total:" || $1 == "upstream.pool_reuse:" {printf "%s %s ", $1, $2}'))"
python3 - "$WORK/rows" "$HZ" "$REQUESTS" "$CONNS" <<'PY'
import statistics, sys
hz = int(sys.argv[2])
rows = {}
for line in open(sys.argv[1]):
    label, s, q, ok, failed = line.split()
    rows.setdefault(label, []).append((int(s), int(q), int(ok), int(failed)))

def us(ticks, ok):
    return ticks / hz * 1e6 / ok if ok else float("nan")

def fmt(values):
    if all(v != v for v in values):  # NaN: not this row's
        return "—"
    return f"{statistics.median(values):.1f} ({', '.join(f'{v:.1f}' for v in values)})"

print("| scenario | sluice µs/req | Squid µs/req | together µs/req | failed |")
print("| --- | --- | --- | --- | --- |")
for label, name in (("squid", "Squid alone, relayed GET"), ("chain", "sluice → Squid, relayed GET"),
                    ("direct", "sluice alone (direct), relayed GET"),
                    ("squid-connect", "Squid alone, GETs in CONNECT tunnels"),
                    ("chain-connect", "sluice → Squid, GETs in CONNECT tunnels")):
    runs = rows.get(label, [])
    if not runs:
        continue
    sl = [us(s, ok) for s, q, ok, f in runs]
    sq = [us(q, ok) for s, q, ok, f in runs]
    tot = [us(s + q, ok) for s, q, ok, f in runs]
    failed = sum(f for *_, f in runs)
    sluice = fmt(sl) if label.startswith(("chain", "direct")) else "—"
    if label == "direct":
        sq = tot = [float("nan")]
    print(f"| {name} | {sluice} | {fmt(sq)} | {fmt(tot)} | {failed} |")
print()
print(f"({sys.argv[3]} requests of 1 KiB per run, {sys.argv[4]} keep-alive connections; medians "
      f"with every run in brackets; Squid and sluice on core 0, sluice-load and sluice-origin on "
      f"core 1)")
PY
