#!/usr/bin/env bash
# Builds //test/fuzz:h1_parser_fuzz with clang, libFuzzer, ASan and UBSan in a separate Bazel
# output base (the main one keeps its gcc cache) and fuzzes the HTTP/1 parser for N seconds
# (default 20) starting from test/fuzz/corpus/h1. New inputs go to a scratch directory, not the
# checked-in corpus; crashes are written to $ARTIFACTS. Exit status is libFuzzer's: 0 = clean.
#
#   test/fuzz/run_fuzz.sh [seconds] [extra libFuzzer flags...]
set -euo pipefail

SECONDS_TO_RUN="${1:-20}"
shift || true
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUTPUT_BASE="${SLUICE_FUZZ_OUTPUT_BASE:-/tmp/sluice-fuzz-base}"
ARTIFACTS="${SLUICE_FUZZ_ARTIFACTS:-/tmp/sluice-fuzz-artifacts}"
SANITIZERS="fuzzer,address,undefined"

if ! command -v clang >/dev/null || ! command -v clang++ >/dev/null; then
  echo "run_fuzz.sh: clang is required (apt-get install -y clang)" >&2
  exit 2
fi

cd "$ROOT"
# --symlink_prefix=/ leaves the workspace's bazel-bin/bazel-out links pointing at the gcc build.
BUILD_FLAGS=(
  --symlink_prefix=/
  --copt=-fsanitize="$SANITIZERS"
  --linkopt=-fsanitize="$SANITIZERS"
  --copt=-fno-sanitize-recover=all
  # The vptr check needs the C++ UBSan runtime, which Bazel's clang link (as CC) leaves out.
  --copt=-fno-sanitize=vptr
  --copt=-DSLUICE_LIBFUZZER
)
CC=clang CXX=clang++ bazel --output_base="$OUTPUT_BASE" build "${BUILD_FLAGS[@]}" \
  //test/fuzz:h1_parser_fuzz
BIN_DIR="$(CC=clang CXX=clang++ bazel --output_base="$OUTPUT_BASE" info "${BUILD_FLAGS[@]}" \
  bazel-bin 2>/dev/null)"
FUZZER="$BIN_DIR/test/fuzz/h1_parser_fuzz"

WORK_CORPUS="$(mktemp -d /tmp/sluice-fuzz-corpus.XXXXXX)"
trap 'rm -rf "$WORK_CORPUS"' EXIT
mkdir -p "$ARTIFACTS"

"$FUZZER" \
  -max_total_time="$SECONDS_TO_RUN" \
  -max_len=4096 \
  -timeout=10 \
  -print_final_stats=1 \
  -dict="$ROOT/test/fuzz/h1.dict" \
  -artifact_prefix="$ARTIFACTS/" \
  "$@" \
  "$WORK_CORPUS" "$ROOT/test/fuzz/corpus/h1"
