#!/bin/bash
# Runs the direct-mode end-to-end tests of sluice-load with Debian's python3 and pytest.
set -euo pipefail
export SLUICE_LOAD_BIN=$2 SLUICE_ORIGIN_BIN=$3 SLUICE_LOAD_DIRECT_ONLY=1 PYTHONDONTWRITEBYTECODE=1
exec /usr/bin/python3 -m pytest -q -p no:cacheprovider "$1"
