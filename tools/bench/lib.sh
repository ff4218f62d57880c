# Shared by the benchmark scripts (sourced, not run): the binaries, a scratch directory cleaned up
# on exit with every process started, and the configurations of sluice and of each peer (Squid,
# nginx, Dante, Tinyproxy, 3proxy) as the benchmarks run them. tools/campaign/run writes its
# peers' configurations with these functions too (bash -c '. tools/bench/lib.sh; bench_...').

SLUICE=${SLUICE_BIN:-bazel-bin/source/exe/sluice}
LOAD=${LOAD_BIN:-bazel-bin/tools/load/sluice-load}
ORIGIN=${ORIGIN_BIN:-bazel-bin/tools/origin/sluice-origin}

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

# bench_sluice_config PORT_BASE [WORKERS]: a fresh key (KEY, kept when already set), test
# certificates ($WORK/certs, kept when there), and $WORK/sluice.yaml with WORKERS workers (1):
# plain port PORT_BASE+3, TLS +4, SOCKS5 +5, admin +6 (set as *_PORT). BENCH_TLS_OPTIONS: more
# keys of the short form's tls section, e.g. "handshakes_per_turn: 0"; BENCH_SERVER_OPTIONS: of
# its server section, e.g. "disable_io_uring: true".
bench_sluice_config() {
  local base=$1 workers=${2:-1}
  SLUICE_PORT=$((base + 3)) TLS_PORT=$((base + 4)) SOCKS_PORT=$((base + 5))
  ADMIN_PORT=$((base + 6))
  KEY=${KEY:-$(head -c 24 /dev/urandom | base64 | tr '+/' '-_')}
  [ -f "$WORK/certs/ca.pem" ] || tools/gen-test-certs.sh "$WORK/certs" >/dev/null
  cat >"$WORK/sluice.yaml" <<YAML
server: {listen: "127.0.0.1:$SLUICE_PORT", workers: $workers${BENCH_SERVER_OPTIONS:+, $BENCH_SERVER_OPTIONS}}
admin: {listen: "127.0.0.1:$ADMIN_PORT"}
auth: {api_keys: ["$KEY"]}
destinations: {allow_private: true}
limits: {max_connections_per_client: 100000, max_connections: 100000,
         max_upstream_connections_per_client: 1000000}
tls: {listen: "127.0.0.1:$TLS_PORT", cert: "$WORK/certs/server-chain.pem", key: "$WORK/certs/server.key"${BENCH_TLS_OPTIONS:+, $BENCH_TLS_OPTIONS}}
socks5: {listen: "127.0.0.1:$SOCKS_PORT"}
YAML
}

# cpu_ticks_of FIELDS PID...: the sum of those /proc/<pid>/stat fields (an awk expression).
cpu_ticks_of() {
  local fields=$1 total=0 p
  shift
  for p in "$@"; do
    [ -r "/proc/$p/stat" ] && total=$((total + $(awk "{print $fields}" "/proc/$p/stat")))
  done
  echo $total
}
# cpu_ticks PID...: user+system clock ticks, the process's own and its reaped children's.
cpu_ticks() { cpu_ticks_of '$14+$15+$16+$17' "$@"; }
# cpu_ticks_user PID...: the user-space part of cpu_ticks (the rest is the kernel's).
cpu_ticks_user() { cpu_ticks_of '$14+$16' "$@"; }

# bench_squid_config DIR PORT KEY [WORKERS [TLS_PORT CERT_CHAIN CERT_KEY]]: DIR/squid.conf for
# Squid 5.7 as a forward proxy with Basic auth (user "bench", password KEY) and the tuning its
# documentation gives for a pure relay: no cache, no access log, WORKERS workers (1), each
# pinned to its own CPU from the first (Squid counts cores from 1, so cores=1 is CPU 0, where
# the proxy under test runs), descriptors up to the hard limit. With TLS_PORT: an https_port
# there with that certificate. WebSocket upgrades are allowed under the name clients send
# ("websocket": Squid compares it as written, and "WebSocket" lets no upgrade through). DIR must
# be readable by the proxy user.
bench_squid_config() {
  local dir=$1 port=$2 key=$3 workers=${4:-1} tls_port=${5:-} chain=${6:-} cert_key=${7:-}
  local n=() i
  for i in $(seq "$workers"); do n+=("$i"); done
  local cores
  cores=$(IFS=,; echo "${n[*]}")
  mkdir -p "$dir"
  printf 'bench:%s\n' "$(openssl passwd -apr1 "$key")" >"$dir/passwd"
  cat >"$dir/squid.conf" <<CONF
http_port 127.0.0.1:$port
${tls_port:+https_port 127.0.0.1:$tls_port tls-cert=$chain tls-key=$cert_key}
pid_filename $dir/squid.pid
cache_log $dir/cache.log
access_log none
cache deny all
cache_mem 0 MB
workers $workers
cpu_affinity_map process_numbers=$cores cores=$cores
max_filedescriptors $(ulimit -Hn)
auth_param basic program /usr/lib/squid/basic_ncsa_auth $dir/passwd
auth_param basic credentialsttl 1 hour
acl authed proxy_auth REQUIRED
http_upgrade_request_protocols websocket allow all
http_access allow authed
http_access deny all
shutdown_lifetime 1 second
CONF
  chown -R proxy:proxy "$dir" 2>/dev/null || true
}

# bench_nginx_config DIR CPU_AFFINITY BODY [WORKERS]: DIR/nginx.conf, WORKERS worker processes
# (1) with that worker_cpu_affinity (a mask per worker, or auto), no access log, BODY inside
# the http block. Start it with nginx -c DIR/nginx.conf -p DIR (add -g 'daemon off;' to keep the
# master in the foreground).
bench_nginx_config() {
  cat >"$1/nginx.conf" <<CONF
worker_processes ${4:-1};
worker_cpu_affinity $2;
worker_rlimit_nofile $(ulimit -Hn);
pid $1/nginx.pid;
error_log $1/error.log;
events { worker_connections 8192; }
http {
  access_log off;
  client_body_temp_path $1/body; proxy_temp_path $1/proxy; fastcgi_temp_path $1/fcgi;
  uwsgi_temp_path $1/uwsgi; scgi_temp_path $1/scgi;
  keepalive_requests 100000000;
  $3
}
CONF
}

# bench_nginx_reverse_proxy ORIGIN_PORT PORT [TLS_PORT CERT_CHAIN CERT_KEY]: the http block of
# nginx as a reverse proxy to 127.0.0.1:ORIGIN_PORT (no auth: nginx has none for proxies), with
# the tuning of its documentation: a pool of kept-alive upstream connections (keepalive 256,
# HTTP/1.1 upstream with the Connection header cleared) and WebSocket upgrades passed on /ws.
# With TLS_PORT: that port with TLS and HTTP/2 (ALPN), a shared session cache and tickets, and
# TLS 1.3 offered as sluice offers it (nginx 1.22's default ssl_protocols leaves it out).
bench_nginx_reverse_proxy() {
  local origin=$1 port=$2 tls_port=${3:-} chain=${4:-} cert_key=${5:-}
  local locations='location / { proxy_pass http://origin; proxy_http_version 1.1; proxy_set_header Connection ""; }
    location /ws { proxy_pass http://origin; proxy_http_version 1.1;
      proxy_set_header Upgrade $http_upgrade; proxy_set_header Connection "upgrade"; }'
  echo "upstream origin { server 127.0.0.1:$origin; keepalive 256; }
  server { listen 127.0.0.1:$port;
    $locations }"
  [ -n "$tls_port" ] && echo "server { listen 127.0.0.1:$tls_port ssl http2;
    ssl_certificate $chain; ssl_certificate_key $cert_key; ssl_protocols TLSv1.2 TLSv1.3;
    ssl_session_cache shared:SSL:10m; ssl_session_tickets on;
    $locations }"
  return 0
}

# bench_dante_config DIR METHOD PORT: DIR/danted.conf for Dante 1.4 (danted) on PORT with that
# socksmethod (username or none): CONNECT and UDP ASSOCIATE from loopback, no logging beyond
# errors.
bench_dante_config() {
  local dir=$1 method=$2 port=$3
  mkdir -p "$dir"
  cat >"$dir/danted.conf" <<CONF
logoutput: $dir/danted.log
internal: 127.0.0.1 port = $port
external: 127.0.0.1
socksmethod: $method
clientmethod: none
user.privileged: root
user.unprivileged: nobody
client pass { from: 127.0.0.0/8 to: 0.0.0.0/0 }
socks pass { from: 127.0.0.0/8 to: 0.0.0.0/0 command: connect udpassociate }
socks pass { from: 0.0.0.0/0 to: 127.0.0.0/8 command: udpreply }
CONF
}

# bench_dante_exec DIR METHOD KEY: replaces the shell with danted on DIR/danted.conf. Dante
# checks usernames against the system's password database: for the username method a test user
# ("sluicebench", password KEY) is added to copies of /etc/passwd and /etc/shadow that are
# bind-mounted in danted's own mount namespace only (needs root).
bench_dante_exec() {
  local dir=$1 method=$2 key=$3
  local cmd=(/usr/sbin/danted -f "$dir/danted.conf" -p "$dir/danted.pid")
  if [ "$method" = username ]; then
    cp /etc/passwd "$dir/passwd"
    cp /etc/shadow "$dir/shadow"
    echo "sluicebench:x:64998:64998::/nonexistent:/usr/sbin/nologin" >>"$dir/passwd"
    echo "sluicebench:$(openssl passwd -6 "$key"):19000:0:99999:7:::" >>"$dir/shadow"
    chmod 600 "$dir/shadow"
    exec unshare -m --propagation private sh -c \
      "mount --bind $dir/passwd /etc/passwd && mount --bind $dir/shadow /etc/shadow && exec \"\$@\"" \
      sh "${cmd[@]}"
  fi
  exec "${cmd[@]}"
}

# bench_tinyproxy_config DIR PORT KEY MAX_CLIENTS: DIR/tinyproxy.conf for Tinyproxy 1.11 with
# Basic auth (user "bench", password KEY) and the tuning of its manual: MaxClients above the
# connections of the test (it runs a thread per client), log level Error, no Via header
# rewriting beyond the default. Run it with tinyproxy -d -c DIR/tinyproxy.conf.
bench_tinyproxy_config() {
  local dir=$1 port=$2 key=$3 max=$4
  mkdir -p "$dir"
  cat >"$dir/tinyproxy.conf" <<CONF
User nobody
Group nogroup
Listen 127.0.0.1
Port $port
Timeout 600
MaxClients $max
LogLevel Error
BasicAuth bench $key
Allow 127.0.0.1
CONF
}

# bench_3proxy_config DIR HTTP_PORT SOCKS_PORT KEY MAX_CONN: DIR/3proxy.cfg for 3proxy 1.0 with
# its users' authentication (user "bench", password KEY), an HTTP proxy on HTTP_PORT and SOCKS5
# on SOCKS_PORT, and the tuning of its high-load guide (doc/html/highload.html): maxconn above
# the connections of the test, TCP_NODELAY on both sides, no logging.
bench_3proxy_config() {
  local dir=$1 http=$2 socks=$3 key=$4 max=$5
  mkdir -p "$dir"
  cat >"$dir/3proxy.cfg" <<CONF
maxconn $max
users bench:CL:$key
auth strong
allow bench
proxy -p$http -i127.0.0.1 -e127.0.0.1 -ocTCP_NODELAY -osTCP_NODELAY
socks -p$socks -i127.0.0.1 -e127.0.0.1 -ocTCP_NODELAY -osTCP_NODELAY
CONF
}
