#!/bin/bash
# Runs the end-to-end origin tests with Debian's python3 (standard library only).
set -euo pipefail
exec /usr/bin/python3 "$1" "$2"
