#!/bin/bash
# Runs the Prometheus format check with Debian's python3 (needs python3-prometheus-client).
set -euo pipefail
exec /usr/bin/python3 "$1" "$2"
