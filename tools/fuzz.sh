#!/usr/bin/env bash
# Builds every libFuzzer target under test/fuzz with clang, libFuzzer, ASan and UBSan (in a
# separate Bazel output base, so the main gcc cache is left alone) and fuzzes each one for N
# seconds (default 20) from its seed corpus in the tree:
#
#   h1_parser_fuzz    request and response heads, chunked bodies   corpus/h1
#   h1_response_fuzz  origin responses: head, interim heads, body  corpus/h1_response
#   config_fuzz       config files (short and full form)           corpus/config, configs/*.yaml
#   socks5_fuzz       SOCKS5 greeting, auth, request, UDP header   corpus/socks5
#   h2_frames_fuzz    HTTP/2 frames into the sluice.http2 filter   corpus/h2_frames
#   client_hello_fuzz TLS ClientHello parser, protocol sniffer     corpus/client_hello
#   proxy_protocol_fuzz PROXY protocol header, v1 and v2           corpus/proxy_protocol
#
# New inputs go to scratch directories, not the checked-in corpus. A crash, a leak, a sanitizer
# report or an input that runs longer than 10 s stops that target; its input is written to
# $SLUICE_FUZZ_ARTIFACTS (default /tmp/sluice-fuzz-artifacts) and the script exits non-zero after
# running the other targets.
#
#   tools/fuzz.sh [seconds] [target...]      e.g. tools/fuzz.sh 60 config_fuzz
set -uo pipefail

SECONDS_EACH="${1:-20}"
shift || true
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUTPUT_BASE="${SLUICE_FUZZ_OUTPUT_BASE:-/tmp/sluice-fuzz-base}"
ARTIFACTS="${SLUICE_FUZZ_ARTIFACTS:-/tmp/sluice-fuzz-artifacts}"
SANITIZERS="fuzzer,address,undefined"
ALL_TARGETS=(h1_parser_fuzz h1_response_fuzz config_fuzz socks5_fuzz h2_frames_fuzz
  client_hello_fuzz proxy_protocol_fuzz)
TARGETS=("$@")
((${#TARGETS[@]})) || TARGETS=("${ALL_TARGETS[@]}")

if ! [[ $SECONDS_EACH =~ ^[0-9]+$ ]] || ((SECONDS_EACH < 1)); then
  echo "fuzz.sh: seconds must be a positive integer, got '$SECONDS_EACH'" >&2
  exit 2
fi
if ! command -v clang >/dev/null || ! command -v clang++ >/dev/null; then
  echo "fuzz.sh: clang is required (apt-get install -y clang)" >&2
  exit 2
fi

cd "$ROOT" || exit 2
# --symlink_prefix=/ leaves the workspace's bazel-bin/bazel-out links pointing at the gcc build.
BUILD_FLAGS=(
  --symlink_prefix=/
  --copt=-fsanitize="$SANITIZERS"
  --linkopt=-fsanitize="$SANITIZERS"
  # Bazel links with clang as CC, which leaves out the C++ part of the UBSan runtime that the
  # vptr and function checks call into.
  --linkopt=-fsanitize-link-c++-runtime
  --copt=-fno-sanitize-recover=all
  --copt=-DSLUICE_LIBFUZZER
)
bazel_fuzz() { CC=clang CXX=clang++ bazel --output_base="$OUTPUT_BASE" "$@"; }

labels=()
for t in "${TARGETS[@]}"; do labels+=("//test/fuzz:$t"); done
start=$(date +%s)
if ! bazel_fuzz build "${BUILD_FLAGS[@]}" "${labels[@]}"; then
  echo "fuzz.sh: build failed" >&2
  exit 2
fi
echo "fuzz.sh: built ${TARGETS[*]} in $(($(date +%s) - start)) s"
BIN_DIR="$(bazel_fuzz info "${BUILD_FLAGS[@]}" bazel-bin 2>/dev/null)"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/sluice-fuzz.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$ARTIFACTS"

failed=()
for t in "${TARGETS[@]}"; do
  seeds=()
  flags=(-max_len=4096 -dict="$ROOT/test/fuzz/h1.dict")
  case "$t" in
    h1_parser_fuzz) seeds=("$ROOT/test/fuzz/corpus/h1") ;;
    h1_response_fuzz) seeds=("$ROOT/test/fuzz/corpus/h1_response") ;;
    h2_frames_fuzz)
      seeds=("$ROOT/test/fuzz/corpus/h2_frames")
      flags=(-max_len=16384)
      ;;
    client_hello_fuzz)
      seeds=("$ROOT/test/fuzz/corpus/client_hello")
      flags=(-max_len=16389)
      ;;
    socks5_fuzz)
      seeds=("$ROOT/test/fuzz/corpus/socks5")
      flags=(-max_len=1024)
      ;;
    proxy_protocol_fuzz)
      seeds=("$ROOT/test/fuzz/corpus/proxy_protocol")
      flags=(-max_len=1100)
      ;;
    config_fuzz)
      # The shipped configs are seeds too; copied so libFuzzer never writes next to them.
      mkdir -p "$WORK/config_seeds"
      cp "$ROOT"/configs/*.yaml "$WORK/config_seeds/"
      seeds=("$ROOT/test/fuzz/corpus/config" "$WORK/config_seeds")
      flags=(-max_len=16384 -dict="$ROOT/test/fuzz/yaml.dict")
      ;;
    *)
      echo "fuzz.sh: unknown target $t (known: ${ALL_TARGETS[*]})" >&2
      failed+=("$t")
      continue
      ;;
  esac
  mkdir -p "$WORK/$t"
  echo
  echo "==> $t for ${SECONDS_EACH} s"
  # -timeout: an input running 10 s is a hang, reported like a crash. -rss_limit_mb: a loader that
  # grows without bound is a bug too.
  if ! "$BIN_DIR/test/fuzz/$t" \
    -max_total_time="$SECONDS_EACH" \
    -timeout=10 \
    -rss_limit_mb=2048 \
    -print_final_stats=1 \
    -artifact_prefix="$ARTIFACTS/$t-" \
    "${flags[@]}" \
    "$WORK/$t" "${seeds[@]}"; then
    failed+=("$t")
  fi
done

echo
if ((${#failed[@]})); then
  echo "fuzz.sh: FAILED: ${failed[*]} (inputs in $ARTIFACTS; replay with a gcc build:" \
    "bazel build //test/fuzz:<target> && bazel-bin/test/fuzz/<target> <file>)"
  exit 1
fi
echo "fuzz.sh: clean: ${TARGETS[*]}, ${SECONDS_EACH} s each"
