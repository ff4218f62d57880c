#!/usr/bin/env bash
# Makes a throwaway CA and a server certificate for 127.0.0.1, ::1 and localhost in DIR, for
# TLS origins in tests. Keys are generated fresh each time and never committed.
#
#   tools/gen-test-certs.sh DIR  ->  DIR/ca.pem DIR/ca.key DIR/server.pem DIR/server.key
#                                    DIR/server-chain.pem (server cert followed by the CA)
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: tools/gen-test-certs.sh DIR" >&2
  exit 2
fi
dir=$1
mkdir -p "$dir"
cd "$dir"

# openssl chatters on stderr even when it succeeds: show its output only on failure.
quiet() {
  if ! "$@" 2>openssl.err; then
    cat openssl.err >&2
    echo "gen-test-certs: failed: $*" >&2
    exit 1
  fi
  rm -f openssl.err
}

# RSA 2048 keeps every client (curl, wrk, Python's ssl) happy; the certs live for one test run.
quiet openssl req -x509 -newkey rsa:2048 -nodes -sha256 -days 2 \
  -keyout ca.key -out ca.pem -subj "/CN=sluice test CA" \
  -addext "basicConstraints=critical,CA:TRUE" \
  -addext "keyUsage=critical,keyCertSign,cRLSign"

# SLUICE_TEST_CERT_KEY=ec gives the server an ECDSA P-256 key (cheaper handshakes) instead.
case "${SLUICE_TEST_CERT_KEY:-rsa}" in
  rsa) newkey=(-newkey rsa:2048) ;;
  ec) newkey=(-newkey ec -pkeyopt ec_paramgen_curve:P-256) ;;
  *) echo "gen-test-certs: SLUICE_TEST_CERT_KEY must be rsa or ec" >&2; exit 2 ;;
esac
quiet openssl req "${newkey[@]}" -nodes -sha256 \
  -keyout server.key -out server.csr -subj "/CN=localhost"

cat >server.ext <<'EXT'
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,IP:::1,DNS:localhost
EXT

quiet openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -sha256 -days 2 \
  -extfile server.ext -out server.pem

cat server.pem ca.pem >server-chain.pem
chmod 600 ca.key server.key
rm -f server.csr server.ext ca.srl
