# Shared by tools/bench/protocols.sh and tools/bench/idle.sh (sourced, not run): the binaries,
# a scratch directory cleaned up on exit with every process started, and a sluice config with
# its plain, TLS and SOCKS5 ports on loopback.

SLUICE=${SLUICE_BIN:-bazel-bin/source/exe/sluice}
LOAD=bazel-bin/tools/load/sluice-load
ORIGIN=bazel-bin/tools/origin/sluice-origin

bench_require_binaries() {
  local b
  for b in "$SLUICE" "$LOAD" "$ORIGIN"; do
    [ -x "$b" ] || {
      echo "build first: bazel build //:sluice //:sluice-load //:sluice-origin" >&2
      exit 1
    }
  done
}

# bench_workdir NAME: sets WORK; kills every pid in PIDS and removes WORK on exit.
PIDS=()
bench_workdir() {
  WORK=$(mktemp -d "/tmp/sluice-bench-$1.XXXXXX")
  trap bench_cleanup EXIT
}
bench_cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  sleep 0.5
  [ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"
}

# bench_sluice_config PORT_BASE: a fresh key (KEY), test certificates, and $WORK/sluice.yaml
# with one worker: plain port PORT_BASE+3, TLS +4, SOCKS5 +5, admin +6 (set as *_PORT).
bench_sluice_config() {
  local base=$1
  SLUICE_PORT=$((base + 3)) TLS_PORT=$((base + 4)) SOCKS_PORT=$((base + 5))
  ADMIN_PORT=$((base + 6))
  KEY=$(head -c 24 /dev/urandom | base64 | tr '+/' '-_')
  tools/gen-test-certs.sh "$WORK/certs" >/dev/null
  cat >"$WORK/sluice.yaml" <<YAML
server: {listen: "127.0.0.1:$SLUICE_PORT", workers: 1}
admin: {listen: "127.0.0.1:$ADMIN_PORT"}
auth: {api_keys: ["$KEY"]}
destinations: {allow_private: true}
limits: {max_connections_per_client: 100000, max_connections: 100000,
         max_upstream_connections_per_client: 1000000}
tls: {listen: "127.0.0.1:$TLS_PORT", cert: "$WORK/certs/server-chain.pem", key: "$WORK/certs/server.key"}
socks5: {listen: "127.0.0.1:$SOCKS_PORT"}
YAML
}

# cpu_ticks PID...: user+system clock ticks, the process's own and its reaped children's.
cpu_ticks() {
  local total=0 p
  for p in "$@"; do
    [ -r "/proc/$p/stat" ] && total=$((total + $(awk '{print $14+$15+$16+$17}' "/proc/$p/stat")))
  done
  echo $total
}

# bench_squid_config DIR PORT KEY: DIR/squid.conf for Squid 5.7 as a forward proxy with Basic
# auth (user "bench", password KEY) and the tuning its documentation gives for a pure relay: no
# cache, no access log, one worker pinned to the first CPU (Squid counts cores from 1, so
# cores=1 is CPU 0, where the proxy under test runs). DIR must be readable by the
# proxy user.
bench_squid_config() {
  local dir=$1 port=$2 key=$3
  mkdir -p "$dir"
  printf 'bench:%s\n' "$(openssl passwd -apr1 "$key")" >"$dir/passwd"
  cat >"$dir/squid.conf" <<CONF
http_port 127.0.0.1:$port
pid_filename $dir/squid.pid
cache_log $dir/cache.log
access_log none
cache deny all
cache_mem 0 MB
workers 1
cpu_affinity_map process_numbers=1 cores=1
auth_param basic program /usr/lib/squid/basic_ncsa_auth $dir/passwd
auth_param basic credentialsttl 1 hour
acl authed proxy_auth REQUIRED
http_upgrade_request_protocols WebSocket allow all
http_access allow authed
http_access deny all
shutdown_lifetime 1 second
CONF
  chown -R proxy:proxy "$dir" 2>/dev/null || true
}
