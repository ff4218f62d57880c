#!/usr/bin/env bash
# Counts the user-space instructions sluice spends per 1 KB keep-alive request, under callgrind
# (valgrind), so two builds or two settings compare without the noise of a shared machine:
#
#   tools/bench/instructions.sh [off|json|squid] [requests] [sluice-load options...]
#
# off: no access log; json or squid: every request logged to a file in that format. Options
# after the count go to sluice-load (--new-conn: a new client connection per request). It runs the
# load twice (requests/3 and requests) and prints (Ir(n) - Ir(n/3)) / (2n/3): startup and
# shutdown cancel out. Needs valgrind and built sluice, sluice-origin and sluice-load.
#
# GROUP_LIMITS and KEY_LIMITS (YAML flow maps, e.g. GROUP_LIMITS='{requests_per_second: 1e6}')
# put the key in a policy group "bench" with those limits and key_limits (and a state_file, so
# quota_bytes may be set).
# BENCH_SERVER_OPTIONS="disable_io_uring: true": one more line under `server:`.
# SLUICE_EXTRA_CONFIG: a file of YAML appended to the config (e.g. a policy for the key's group,
# "default"; not with GROUP_LIMITS or KEY_LIMITS, which write a policy of their own).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
MODE=${1:-off}
N=${2:-6000}
shift $(($# < 2 ? $# : 2))
LOAD_OPTS=("$@")
SLUICE=${SLUICE_BIN:-bazel-bin/source/exe/sluice}
command -v valgrind >/dev/null || { echo "needs valgrind (apt-get install valgrind)" >&2; exit 1; }
WORK=$(mktemp -d "${TMPDIR:-/tmp}/sluice-instructions.XXXXXX")

count() {  # requests -> total Ir of sluice serving them
  local n=$1 dir="$WORK/$1"
  mkdir -p "$dir"
  bazel-bin/tools/origin/sluice-origin --listen 127.0.0.1:18311 -t 1 >"$dir/origin.out" 2>&1 &
  local origin=$!
  cat >"$dir/s.yaml" <<YAML
server:
  listen: 127.0.0.1:18312
  workers: 1${BENCH_SERVER_OPTIONS:+
  $BENCH_SERVER_OPTIONS}
admin:
  listen: 127.0.0.1:18313
destinations:
  allow: ["127.0.0.1/32"]
YAML
  if [ -n "${GROUP_LIMITS:-}${KEY_LIMITS:-}" ]; then
    printf 'auth:\n  api_keys: [{name: bench, key: "kkkkkkkkkkkkkkkk", group: bench}]\n' >>"$dir/s.yaml"
    # A state file for quotas (quota_bytes needs one; without a quota it is never written).
    printf 'policy:\n  state_file: %s/quota.state\n  groups:\n    - name: bench\n' "$dir" \
      >>"$dir/s.yaml"
    if [ -n "${GROUP_LIMITS:-}" ]; then printf '      limits: %s\n' "$GROUP_LIMITS" >>"$dir/s.yaml"; fi
    if [ -n "${KEY_LIMITS:-}" ]; then printf '      key_limits: %s\n' "$KEY_LIMITS" >>"$dir/s.yaml"; fi
  else
    printf 'auth:\n  api_keys: ["kkkkkkkkkkkkkkkk"]\n' >>"$dir/s.yaml"
  fi
  if [ -n "${SLUICE_EXTRA_CONFIG:-}" ]; then cat "$SLUICE_EXTRA_CONFIG" >>"$dir/s.yaml"; fi
  if [ "$MODE" != off ]; then
    printf 'access_log:\n  mode: all\n  format: %s\n  path: %s/access.log\n' "$MODE" "$dir" \
      >>"$dir/s.yaml"
  fi
  valgrind --tool=callgrind --callgrind-out-file="$dir/cg.out" "$SLUICE" run -c "$dir/s.yaml" \
    >"$dir/sluice.log" 2>&1 &
  local proxy=$!
  for _ in $(seq 100); do curl -sf http://127.0.0.1:18313/ready >/dev/null 2>&1 && break; sleep 0.2; done
  bazel-bin/tools/load/sluice-load --dst http://127.0.0.1:18311/bytes/1024 \
    --proxy http://u:kkkkkkkkkkkkkkkk@127.0.0.1:18312 -c 4 -n "$n" ${LOAD_OPTS[@]+"${LOAD_OPTS[@]}"} \
    >"$dir/load.out" 2>&1
  kill -TERM "$proxy"; wait "$proxy" || true
  kill "$origin"; wait "$origin" 2>/dev/null || true
  awk '/^summary:/ {print $2}' "$dir/cg.out"
}

small=$(count $((N / 3)))
large=$(count "$N")
LIMITS="${GROUP_LIMITS:+, group limits $GROUP_LIMITS}${KEY_LIMITS:+, key limits $KEY_LIMITS}"
echo "access log $MODE${LOAD_OPTS[*]+ ${LOAD_OPTS[*]}}$LIMITS: $(( (large - small) / (N - N / 3) ))" \
  "instructions per request (logs: $WORK)"
