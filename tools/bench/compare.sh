#!/usr/bin/env bash
# CPU per proxied request: sluice beside nginx (reverse proxy) and Squid (forward proxy), in one
# run, on loopback. The proxy under test gets core 0 alone; wrk and the nginx origin share core 1.
# "CPU" is the proxy's own user+system time (from /proc/<pid>/stat) divided by requests served.
#
#   tools/bench/compare.sh [--size 1k|10k|1m] [--duration 10] [--connections 64] [--close]
#                          [--only sluice|nginx|squid|floor] [--access-log json|squid]
#                          [--rounds N [--only LIST]]
#
# --close sends "Connection: close": every request on a new client connection (origin
# connections stay pooled where the proxy pools them).
#
# COMPARE_PERF_DIR=DIR: also `perf record -e cpu-clock` each proxy's processes during the
# measured run, into DIR/<proxy>.data, with the requests served in DIR/<proxy>.requests (for
# costs per request by symbol: perf report -i DIR/sluice.data --sort dso,sym).
#
# COMPARE_NSTAT_DIR=DIR: also the kernel's TCP counters (nstat, the whole machine) over each
# measured run, into DIR/<proxy>.nstat, with the requests served in DIR/<proxy>.requests: the
# segments, pure ACKs and delayed ACKs per request each proxy's way of reading and writing costs
# every side of the exchange.
#
# --only floor: tools/bench/floor_relay.c (built here with gcc), the least an HTTP/1.1 proxy with
# a pool of origin connections can do for these requests: the part of a request's cost that no
# proxy can take away (the kernel's, mostly). Never part of the default run.
#
# --rounds N: N rounds, the proxies taking turns within each (sluice, nginx and floor, or the
# comma-separated --only list), each run as its own `--only` run: this machine's load moves
# every proxy's cost from minute to minute, so only runs close in time compare. Prints every
# round, then each proxy's medians and the median ÷ nginx's, and the median of the per-round
# ratios (the two disagree when the rounds do).
#
# BENCH_SERVER_OPTIONS="disable_io_uring: true": one more line under sluice's `server:`.
#
# Needs: wrk, nginx-light, squid (tools/deps.sh --bench installs them) and a built sluice
# (bazel build //:sluice). Prints a markdown table.
set -euo pipefail
cd "$(dirname "$0")/../.."
. tools/bench/lib.sh  # cpu_ticks, the peers' configurations

SIZE=1k
DURATION=10
CONNS=64
CLOSE=0
ONLY=""
ACCESS_LOG=""
ROUNDS=1
PASS=()  # the options each round's runs get
while [ $# -gt 0 ]; do
  case "$1" in
    --size) SIZE=$2; PASS+=("$1" "$2"); shift 2 ;;
    --duration) DURATION=$2; PASS+=("$1" "$2"); shift 2 ;;
    --connections) CONNS=$2; PASS+=("$1" "$2"); shift 2 ;;
    --only) ONLY=$2; shift 2 ;;
    --close) CLOSE=1; PASS+=("$1"); shift ;;
    --access-log) ACCESS_LOG=$2; PASS+=("$1" "$2"); shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

if [ "$ROUNDS" -gt 1 ]; then
  IFS=, read -ra LIST <<<"${ONLY:-sluice,nginx,floor}"
  RESULTS=$(mktemp /tmp/sluice-rounds.XXXXXX)
  for r in $(seq "$ROUNDS"); do
    line="round $r:"
    for p in "${LIST[@]}"; do
      row=$("$0" --only "$p" "${PASS[@]}" | grep '^| ' | tail -1)
      cpu=$(echo "$row" | awk -F'|' '{gsub(/ /, "", $3); print $3}')
      user=$(echo "$row" | awk -F'|' '{gsub(/ /, "", $4); print $4}')
      echo "$r $p $cpu $user" >>"$RESULTS"
      line="$line $p $cpu ($user)"
    done
    echo "$line"
  done
  # Medians per proxy, each against nginx's, and the median of the rounds' own ratios.
  awk -v list="${LIST[*]}" '
    function median(a, n,   i, j, t) {
      for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) {
        t = a[j]; a[j] = a[j - 1]; a[j - 1] = t
      }
      return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    { c[$2, ++n[$2]] = $3; u[$2, n[$2]] = $4; at[$2, $1] = $3 }
    END {
      k = split(list, names, " ")
      print "| proxy | CPU µs/req, median | of it in user space | ÷ nginx (medians) | ÷ nginx (median of rounds) |"
      print "| --- | --- | --- | --- | --- |"
      if ("nginx" in n) {
        for (j = 1; j <= n["nginx"]; j++) x[j] = c["nginx", j]
        nginx = median(x, n["nginx"])
      }
      for (i = 1; i <= k; i++) {
        p = names[i]
        for (j = 1; j <= n[p]; j++) { x[j] = c[p, j]; y[j] = u[p, j] }
        ratio = "-"; per = "-"
        if (nginx > 0) {
          ratio = sprintf("%.2f", median(x, n[p]) / nginx)
          m = 0
          for (j = 1; j <= n[p]; j++) if (at["nginx", j] > 0) z[++m] = at[p, j] / at["nginx", j]
          if (m > 0) per = sprintf("%.2f", median(z, m))
        }
        for (j = 1; j <= n[p]; j++) x[j] = c[p, j]
        printf "| %s | %.2f | %.2f | %s | %s |\n", p, median(x, n[p]), median(y, n[p]), ratio, per
      }
    }' "$RESULTS"
  rm -f "$RESULTS"
  exit 0
fi

SLUICE=${SLUICE_BIN:-bazel-bin/source/exe/sluice}
[ -x "$SLUICE" ] || { echo "build sluice first: bazel build //:sluice" >&2; exit 1; }
for tool in wrk nginx squid; do
  command -v $tool >/dev/null || { echo "missing $tool: tools/deps.sh --bench" >&2; exit 1; }
done

WORK=$(mktemp -d /tmp/sluice-bench.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  [ -f "$WORK/origin/nginx.pid" ] && kill "$(cat "$WORK/origin/nginx.pid")" 2>/dev/null || true
  [ -f "$WORK/rp/nginx.pid" ] && kill "$(cat "$WORK/rp/nginx.pid")" 2>/dev/null || true
  [ -f "$WORK/squid/squid.pid" ] && kill "$(cat "$WORK/squid/squid.pid")" 2>/dev/null || true
  sleep 0.5
  rm -rf "$WORK"
}
trap cleanup EXIT

ORIGIN_PORT=18201 SLUICE_PORT=18202 ADMIN_PORT=18203 RP_PORT=18204 SQUID_PORT=18205 FLOOR_PORT=18206
KEY=$(head -c 24 /dev/urandom | base64 | tr '+/' '-_')
AUTH=$(printf 'bench:%s' "$KEY" | base64 -w0)

mkdir -p "$WORK/www" "$WORK/origin" "$WORK/rp" "$WORK/squid"
# nginx workers run as nobody: the object must be readable by them.
chmod 755 "$WORK" "$WORK/www"
case "$SIZE" in
  1k) head -c 1024 /dev/urandom > "$WORK/www/obj" ;;
  10k) head -c 10240 /dev/urandom > "$WORK/www/obj" ;;
  1m) head -c 1048576 /dev/urandom > "$WORK/www/obj" ;;
  *) echo "size must be 1k, 10k or 1m" >&2; exit 2 ;;
esac
chmod 644 "$WORK/www/obj"

nginx_conf() {  # dir cpu body
  bench_nginx_config "$1" "$2" "$3"
  nginx -c "$1/nginx.conf" -p "$1"
}

# The origin: nginx serving the object, on core 1 with the load generator.
nginx_conf "$WORK/origin" 10 "server { listen 127.0.0.1:$ORIGIN_PORT; root $WORK/www; }"
URL="http://127.0.0.1:$ORIGIN_PORT/obj"

CONNECTION_HEADER=""
[ "$CLOSE" = 1 ] && CONNECTION_HEADER='wrk.headers["Connection"] = "close"'
cat > "$WORK/proxy.lua" <<LUA
wrk.method = "GET"
wrk.path = "$URL"
wrk.headers["Host"] = "127.0.0.1:$ORIGIN_PORT"
wrk.headers["Proxy-Authorization"] = "Basic $AUTH"
$CONNECTION_HEADER
LUA
cat > "$WORK/direct.lua" <<LUA
$CONNECTION_HEADER
LUA


HZ=$(getconf CLK_TCK)
ROWS=()
measure() {  # name target-url lua pids...
  local name=$1 target=$2 lua=$3; shift 3
  # Warm up (connections, pools), then measure.
  taskset -c 1 wrk -t1 -c"$CONNS" -d2s ${lua:+-s "$lua"} "$target" >/dev/null
  local t0 t1 u0 u1 out reqs errors rps
  t0=$(cpu_ticks "$@")
  u0=$(cpu_ticks_user "$@")
  local perf_pid="" slug
  slug=$(echo "$name" | awk '{print tolower($1)}')
  if [ -n "${COMPARE_PERF_DIR:-}" ]; then
    mkdir -p "$COMPARE_PERF_DIR"
    perf record -q -e cpu-clock -F 4999 -p "$(echo "$@" | tr ' ' ',')" \
      -o "$COMPARE_PERF_DIR/$slug.data" -- sleep "$DURATION" 2>/dev/null &
    perf_pid=$!
  fi
  if [ -n "${COMPARE_NSTAT_DIR:-}" ]; then
    mkdir -p "$COMPARE_NSTAT_DIR"
    NSTAT_HISTORY="$COMPARE_NSTAT_DIR/.history" nstat -n
  fi
  out=$(taskset -c 1 wrk -t1 -c"$CONNS" -d"${DURATION}s" ${lua:+-s "$lua"} "$target")
  if [ -n "${COMPARE_NSTAT_DIR:-}" ]; then
    NSTAT_HISTORY="$COMPARE_NSTAT_DIR/.history" nstat >"$COMPARE_NSTAT_DIR/$slug.nstat"
    echo "$out" | awk '/requests in/ {print $1}' >"$COMPARE_NSTAT_DIR/$slug.requests"
  fi
  if [ -n "$perf_pid" ]; then
    wait "$perf_pid" || true
    echo "$out" | awk '/requests in/ {print $1}' >"$COMPARE_PERF_DIR/$slug.requests"
  fi
  t1=$(cpu_ticks "$@")
  u1=$(cpu_ticks_user "$@")
  reqs=$(echo "$out" | awk '/requests in/ {print $1}')
  rps=$(echo "$out" | awk '/Requests\/sec/ {printf "%.0f", $2}')
  errors=$(echo "$out" | awk '/Non-2xx|Socket errors/ {print}' | tr '\n' ' ')
  local us user
  us=$(awk -v t=$((t1 - t0)) -v hz="$HZ" -v r="$reqs" 'BEGIN {printf "%.1f", t * 1e6 / hz / r}')
  user=$(awk -v t=$((u1 - u0)) -v hz="$HZ" -v r="$reqs" 'BEGIN {printf "%.1f", t * 1e6 / hz / r}')
  ROWS+=("| $name | $us | $user | $rps | ${errors:-none} |")
}

if [ -z "$ONLY" ] || [ "$ONLY" = sluice ]; then
  cat > "$WORK/sluice.yaml" <<YAML
server:
  listen: 127.0.0.1:$SLUICE_PORT
  workers: 1${BENCH_SERVER_OPTIONS:+
  $BENCH_SERVER_OPTIONS}
auth:
  api_keys: ["$KEY"]
admin:
  listen: 127.0.0.1:$ADMIN_PORT
destinations:
  allow: ["127.0.0.1/32"]   # the origin is on loopback, which the guard refuses by default
YAML
  if [ -n "${ACCESS_LOG:-}" ]; then
    # Every request logged, to a file: what the access log costs per request.
    printf 'access_log:\n  mode: all\n  format: %s\n  path: %s\n' "$ACCESS_LOG" \
      "$WORK/access.log" >> "$WORK/sluice.yaml"
  fi
  taskset -c 0 "$SLUICE" run -c "$WORK/sluice.yaml" 2>"$WORK/sluice.log" &
  PIDS+=($!)
  SPID=$!
  for _ in $(seq 50); do curl -sf "http://127.0.0.1:$ADMIN_PORT/ready" >/dev/null && break; sleep 0.1; done
  measure "sluice (auth on)" "http://127.0.0.1:$SLUICE_PORT" "$WORK/proxy.lua" "$SPID"
  kill -TERM "$SPID"; wait "$SPID" || true
fi

if [ -z "$ONLY" ] || [ "$ONLY" = nginx ]; then
  nginx_conf "$WORK/rp" 01 "$(bench_nginx_reverse_proxy "$ORIGIN_PORT" "$RP_PORT")"
  sleep 0.3
  RP_PIDS=$(pgrep -P "$(cat "$WORK/rp/nginx.pid")" | tr '\n' ' ')
  measure "nginx 1.22 reverse proxy (no auth)" "http://127.0.0.1:$RP_PORT/obj" "$WORK/direct.lua" $RP_PIDS
fi

if [ -z "$ONLY" ] || [ "$ONLY" = squid ]; then
  bench_squid_config "$WORK/squid" "$SQUID_PORT" "$KEY"
  squid -f "$WORK/squid/squid.conf" -N 2>"$WORK/squid/stderr" &
  PIDS+=($!)
  for _ in $(seq 50); do
    curl -sf -o /dev/null -x "http://127.0.0.1:$SQUID_PORT" -U "bench:$KEY" "$URL" && break
    sleep 0.2
  done
  SQUID_PIDS=$(pgrep -f "squid -f $WORK/squid/squid.conf" | tr '\n' ' ')
  measure "Squid 5.7 forward proxy (basic auth)" "http://127.0.0.1:$SQUID_PORT" "$WORK/proxy.lua" $SQUID_PIDS
fi

if [ "$ONLY" = floor ]; then
  gcc -O2 tools/bench/floor_relay.c -o "$WORK/floor_relay"
  taskset -c 0 "$WORK/floor_relay" "$FLOOR_PORT" "$ORIGIN_PORT" &
  PIDS+=($!)
  FPID=$!
  sleep 0.2
  measure "floor: the least a proxy does" "http://127.0.0.1:$FLOOR_PORT/obj" \
    "$WORK/direct.lua" "$FPID"
fi

mode="keep-alive"
[ "$CLOSE" = 1 ] && mode="new client connection per request"
echo "size $SIZE, $mode, $CONNS connections, ${DURATION}s, proxy on core 0, wrk + nginx origin on core 1"
echo "| proxy | CPU µs/req | of it in user space | req/s | errors |"
echo "| --- | --- | --- | --- | --- |"
for r in "${ROWS[@]}"; do echo "$r"; done
