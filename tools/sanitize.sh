#!/usr/bin/env bash
# Builds everything with AddressSanitizer and UBSan (`--config=asan` in .bazelrc, gcc) in a
# separate Bazel output base (the main cache keeps the plain build), then
#   1. runs the unit tests under the sanitizers: bazel test --config=asan //test/...
#   2. builds the ASan sluice binary and runs the integration suite (test/integration) against it.
# Sanitizer reports from sluice processes go to files under the log directory (ASan's log_path),
# so a report from a process whose test passed anyway still fails the run; so does a leak (LSan
# runs when each sluice exits). Ends with one summary line; exits non-zero on any finding.
#
#   tools/sanitize.sh [unit|integration|all] [extra pytest arguments...]
#
# Not part of tools/test.sh: it is a second full build (several minutes cold on 2 cores). The
# ASan binary is also left for manual runs: the path is printed (SLUICE_BIN=... pytest ...).
set -uo pipefail

MODE="${1:-all}"
shift || true
case "$MODE" in
  unit | integration | all) ;;
  *)
    echo "usage: tools/sanitize.sh [unit|integration|all] [pytest arguments...]" >&2
    exit 2
    ;;
esac

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
OUTPUT_BASE="${SLUICE_ASAN_OUTPUT_BASE:-/tmp/sluice-asan-base}"
logs=$(mktemp -d "${TMPDIR:-/tmp}/sluice-sanitize.XXXXXX")
# --symlink_prefix=/ leaves the workspace's bazel-* links pointing at the plain build.
FLAGS=(--config=asan --symlink_prefix=/)
bazel_asan() { bazel --output_base="$OUTPUT_BASE" "$@"; }

failures=()
step() { printf '\n==> %s\n' "$*"; }

# Reports from processes outside Bazel's test runner (the sluice binaries pytest starts).
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:log_path=$logs/asan"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$logs/ubsan"

if [[ $MODE != integration ]]; then
  step "unit tests under ASan+UBSan (bazel test --config=asan //test/...)"
  start=$(date +%s)
  bazel_asan test "${FLAGS[@]}" //test/... 2>&1 | tee "$logs/unit.log"
  rc=${PIPESTATUS[0]}
  echo "unit: bazel exit $rc after $(($(date +%s) - start)) s"
  if [[ $rc -ne 0 ]]; then
    failures+=("unit tests (bazel exit $rc: $(grep -cE '^//[^ ]+ +(FAILED|TIMEOUT|NO STATUS)' \
      "$logs/unit.log") target(s) failed or did not build)")
  fi
fi

if [[ $MODE != unit ]]; then
  step "ASan sluice binary (bazel build --config=asan //:sluice)"
  start=$(date +%s)
  if ! bazel_asan build "${FLAGS[@]}" //:sluice 2>&1 | tee "$logs/build.log"; then
    failures+=("build //:sluice with ASan")
  else
    echo "build: $(($(date +%s) - start)) s"
    bin="$(bazel_asan info "${FLAGS[@]}" bazel-bin 2>/dev/null)/source/exe/sluice"
    step "integration tests against $bin"
    # Deselected: it takes the process's descriptors away, and then UBSan's vptr check cannot
    # create the pipe it probes memory with, so it reports a valid object as "invalid vptr".
    EMFILE_TEST=test/integration/test_limits.py
    EMFILE_TEST+=::test_accept_backs_off_when_out_of_descriptors_and_recovers
    # Deselected: ASan's allocator replaces glibc's (malloc_trim has nothing to hand back) and
    # sluice's slabs are off under it (every object comes from ASan's heap, which keeps it).
    TRIM_TEST="test/integration/test_lifecycle.py::test_free_memory_goes_back_after_a_burst"
    SLUICE_BIN=$bin PYTHONDONTWRITEBYTECODE=1 \
      /usr/bin/python3 -m pytest -q -p no:cacheprovider -rfE test/integration \
      --deselect "$EMFILE_TEST" --deselect "$TRIM_TEST" "$@" 2>&1 | tee "$logs/integration.log"
    rc=${PIPESTATUS[0]}
    [[ $rc -ne 0 ]] && failures+=("integration tests (pytest exit $rc)")
    echo "ASan binary for manual runs: SLUICE_BIN=$bin"
  fi
fi

reports=$(find "$logs" -maxdepth 1 \( -name 'asan.*' -o -name 'ubsan.*' \) -size +0 2>/dev/null)
if [[ -n $reports ]]; then
  step "sanitizer reports from sluice processes"
  for r in $reports; do
    echo "--- $r"
    head -60 "$r"
  done
  failures+=("$(wc -l <<<"$reports") sanitizer report(s)")
fi

echo
echo "logs: $logs"
if ((${#failures[@]})); then
  joined=""
  for f in "${failures[@]}"; do joined+="$f; "; done
  echo "sluice sanitize: FAIL (${joined%; })"
  exit 1
fi
echo "sluice sanitize: PASS ($MODE)"
