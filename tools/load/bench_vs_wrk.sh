#!/usr/bin/env bash
# sluice-load against wrk in direct mode, in the same session: one sluice-origin, then ROUNDS
# alternating runs of wrk and sluice-load with the same threads, connections and duration.
# Prints each round's request rates and each tool's CPU time per request (user + system, from
# /usr/bin/time), then the medians and the median ratio. The CPU cost is the steadier figure on a
# shared machine: a tool that spends less CPU per request can drive more of them.
#
#   tools/load/bench_vs_wrk.sh [ROUNDS] [SECONDS] [CONNECTIONS] [SIZE]    (defaults 7 3 64 1024)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
rounds=${1:-7}
secs=${2:-3}
conns=${3:-64}
size=${4:-1024}
bin=bazel-bin
load=$bin/tools/load/sluice-load
origin=$bin/tools/origin/sluice-origin
[[ -x $load && -x $origin ]] || { echo "bazel build //:sluice-load //:sluice-origin" >&2; exit 1; }
command -v wrk >/dev/null || { echo "wrk is not installed" >&2; exit 1; }

out=$(mktemp -d)
# The origin on CPU 0, the load generators on CPU 1 (when there are two).
pin_origin=() pin_load=()
if [[ $(nproc) -ge 2 ]] && command -v taskset >/dev/null; then
  pin_origin=(taskset -c 0) pin_load=(taskset -c 1)
fi
"${pin_origin[@]}" "$origin" --listen 127.0.0.1:0 -t 1 >"$out/origin" 2>&1 &
origin_pid=$!
trap 'kill $origin_pid 2>/dev/null; rm -rf "$out"' EXIT
for _ in $(seq 50); do grep -q listening "$out/origin" 2>/dev/null && break; sleep 0.1; done
port=$(grep -o '[0-9]*$' "$out/origin" | head -1)
url=http://127.0.0.1:$port/bytes/$size
echo "url $url, $rounds rounds of ${secs}s, 1 thread, $conns connections, $(nproc) cores"
echo "round  wrk_req/s  load_req/s  ratio  wrk_cpu_us/req  load_cpu_us/req"
for r in $(seq "$rounds"); do
  /usr/bin/time -f "%U %S" -o "$out/wt" "${pin_load[@]}" wrk -t1 -c"$conns" -d"${secs}s" "$url" >"$out/w"
  /usr/bin/time -f "%U %S" -o "$out/lt" "${pin_load[@]}" "$load" -q -t1 -c"$conns" -d"${secs}s" \
    --json --dst "$url" >"$out/l"
  /usr/bin/python3 - "$r" "$out" <<'PY' | tee -a "$out/rows"
import json, re, sys
r, d = sys.argv[1], sys.argv[2]
w = open(d + "/w").read()
wrps = float(re.search(r"Requests/sec:\s+([\d.]+)", w).group(1))
m = re.search(r"(\d+) requests in ([\d.]+)(\w+)", w)
wreq = int(m.group(1))
l = json.load(open(d + "/l"))
lrps, lreq = l["requests_per_s"], l["requests"]
assert l["failed"] == 0, l
wcpu = sum(map(float, open(d + "/wt").read().split()[-2:]))
lcpu = sum(map(float, open(d + "/lt").read().split()[-2:]))
print(f"{r:>5}  {wrps:9.0f}  {lrps:10.0f}  {lrps / wrps:5.2f}  {wcpu * 1e6 / wreq:14.2f}  "
      f"{lcpu * 1e6 / lreq:15.2f}")
PY
done
/usr/bin/python3 - "$out/rows" <<'PY'
import statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
med = lambda i: statistics.median(r[i] for r in rows)
print(f"median wrk {med(1):.0f} req/s, sluice-load {med(2):.0f} req/s, ratio of medians "
      f"{med(2) / med(1):.3f}, median of ratios {med(3):.3f}; CPU per request: wrk {med(4):.2f} us, "
      f"sluice-load {med(5):.2f} us")
PY
