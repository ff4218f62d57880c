#!/usr/bin/env bash
# Runs every test: installs what the tests need, runs the unit tests (bazel test //...), builds
# sluice, sluice-load and sluice-origin, runs the integration tests against the real binary with
# real clients and peers (curl, nginx, wrk, Squid, Dante, headless Chromium, python3-h2, nghttp,
# websocket-client, PySocks), the benchmark campaign's smoke test (tools/campaign/run --quick, about
# two minutes: the machinery and its report, no performance number checked), and a short fuzz
# smoke (tools/fuzz.sh). Ends with one summary line; exits non-zero on any failure.
# The ASan/UBSan run is separate (a second full build): tools/sanitize.sh.
#
#   tools/test.sh            (works from any directory; as root on a fresh Debian 12 machine)
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
logs=$(mktemp -d "${TMPDIR:-/tmp}/sluice-test.XXXXXX")

failures=()
unit_passed=0
unit_failed=0
integ_passed=0
integ_failed=0
failed_names=()

step() { printf '\n==> %s\n' "$*"; }

summary() {
  local verdict=PASS detail
  ((${#failures[@]})) && verdict=FAIL
  detail="unit $unit_passed, integration $integ_passed"
  if [[ $verdict == FAIL ]]; then
    local f joined=""
    for f in "${failures[@]}"; do joined+="$f; "; done
    detail="${joined}$detail passed"
  fi
  echo
  # What failed, by name, next to the verdict (the logs may be gone when someone reads this).
  local name
  for name in "${failed_names[@]}"; do echo "failed: $name"; done
  echo "logs: $logs"
  echo "sluice tests: $verdict ($detail)"
  # The plain tally, for tools that read the last line.
  # Steps that are not test cases (deps, build, fuzz) count as one failure each.
  local failed=$((unit_failed + integ_failed))
  ((failed < ${#failures[@]})) && failed=${#failures[@]}
  echo "total: $((unit_passed + integ_passed)) passed, $failed failed"
  [[ $verdict == PASS ]]
}

# -- dependencies ------------------------------------------------------------------------------
step "dependencies (tools/deps.sh --test)"
if ! tools/deps.sh --test; then
  failures+=("deps")
  summary
  exit 1
fi

# -- unit tests --------------------------------------------------------------------------------
step "unit tests (bazel test //...)"
bazel test //... 2>&1 | tee "$logs/unit.log"
rc=${PIPESTATUS[0]}
# Per-target result lines: "//test/foo:bar_test    PASSED in 0.1s" (or "(cached) PASSED").
unit_targets_passed=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED' "$logs/unit.log")
unit_targets_failed=$(grep -cE \
  '^//[^ ]+ +(\(cached\) )?(FAILED|TIMEOUT|NO STATUS|FLAKY|INCOMPLETE)' "$logs/unit.log")
# Count gtest cases, not targets, from each passing target's test.xml.
testlogs=$(bazel info bazel-testlogs 2>/dev/null)
unit_passed=$(grep -oE '^//[^ ]+ +(\(cached\) )?PASSED' "$logs/unit.log" | awk '{print $1}' |
  TESTLOGS=$testlogs /usr/bin/python3 -c '
import glob, os, re, sys
total = 0
for label in sys.stdin.read().split():
    pkg, _, name = label[2:].partition(":")
    d = os.path.join(os.environ["TESTLOGS"], pkg, name)
    xmls = glob.glob(d + "/test.xml") or glob.glob(d + "/shard_*/test.xml")
    n = 0
    for x in xmls:
        m = re.search(r"<testsuites[^>]*\btests=\"(\d+)\"", open(x, errors="replace").read())
        n += int(m.group(1)) if m else 1
    total += n or 1  # not gtest, or no XML: count the target once
print(total)')
unit_failed=$unit_targets_failed
if [[ $rc -eq 4 ]]; then
  echo "unit: no test targets found"
elif [[ $rc -ne 0 || $unit_targets_failed -ne 0 ]]; then
  failures+=("unit tests (bazel exit $rc, $unit_targets_failed target(s) failed)")
  ((unit_failed == 0)) && unit_failed=1
  mapfile -t -O "${#failed_names[@]}" failed_names < <(grep -E \
    '^//[^ ]+ +(\(cached\) )?(FAILED|TIMEOUT|NO STATUS|FLAKY|INCOMPLETE)' "$logs/unit.log" |
    awk '{print $1}')
else
  echo "unit: $unit_targets_passed targets, $unit_passed test cases passed"
fi

# -- build the binary the integration tests run ------------------------------------------------
step "build (bazel build //:sluice //:sluice-load //:sluice-origin)"
if ! bazel build //:sluice //:sluice-load //:sluice-origin 2>&1 | tee "$logs/build.log"; then
  failures+=("build //:sluice //:sluice-load //:sluice-origin")
  summary
  exit 1
fi
sluice_bin="$(bazel info bazel-bin 2>/dev/null)/source/exe/sluice"
if [[ ! -x $sluice_bin ]]; then
  failures+=("no binary at $sluice_bin")
  summary
  exit 1
fi
"$sluice_bin" --version

# -- integration tests -------------------------------------------------------------------------
# Debian's python3 on purpose: it has python3-pytest and friends; a pyenv python3 would not.
# test_load.py drives sluice-load through Squid, Dante, nginx and sluice itself; test_campaign.py
# runs tools/campaign/run --quick and renders its report in headless Chromium.
step "integration tests (pytest test/integration test/tools/load/test_load.py test/tools/campaign)"
SLUICE_BIN=$sluice_bin PYTHONDONTWRITEBYTECODE=1 \
  /usr/bin/python3 -m pytest -q -p no:cacheprovider -rfE test/integration \
  test/tools/load/test_load.py test/tools/campaign/test_campaign.py 2>&1 |
  tee "$logs/integration.log"
rc=${PIPESTATUS[0]}
last=$(grep -E '(passed|failed|error|no tests ran)' "$logs/integration.log" | tail -1)
integ_passed=$(grep -oE '[0-9]+ passed' <<<"$last" | grep -oE '[0-9]+' || true)
integ_failed=$(grep -oE '[0-9]+ (failed|errors?)' <<<"$last" | grep -oE '[0-9]+' |
  awk '{s += $1} END {print s + 0}')
integ_passed=${integ_passed:-0}
if [[ $rc -eq 5 ]]; then
  failures+=("integration: no tests collected")
elif [[ $rc -ne 0 ]]; then
  failures+=("integration tests (pytest exit $rc)")
  ((integ_failed == 0)) && integ_failed=1
  # pytest -rfE ends with one "FAILED path::test - reason" (or ERROR) line per failure.
  mapfile -t -O "${#failed_names[@]}" failed_names < \
    <(grep -E '^(FAILED|ERROR) ' "$logs/integration.log" | cut -c1-300)
fi

# -- fuzz smoke --------------------------------------------------------------------------------
# Every libFuzzer target for 10 s each (clang build in its own output base: ~1 min cold).
step "fuzz smoke (tools/fuzz.sh 10)"
if ! tools/fuzz.sh 10 2>&1 | tee "$logs/fuzz.log"; then
  failures+=("fuzz smoke")
fi

summary
