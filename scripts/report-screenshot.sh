#!/usr/bin/env bash
# A screenshot of a results directory's report.html, taken by headless Chromium (what
# docs/report.png is): the page as a reader's browser draws it, its top WIDTHxHEIGHT.
#
#   scripts/report-screenshot.sh RESULTS_DIR OUT.png [WIDTH,HEIGHT]
#
# Needs Debian's chromium (`apt-get install chromium`; not part of any set-up: only this
# documentation step uses it). Changes nothing but OUT.png.
set -euo pipefail

if [ $# -lt 2 ] || [ $# -gt 3 ]; then
  echo "usage: $0 RESULTS_DIR OUT.png [WIDTH,HEIGHT]" >&2
  exit 2
fi
report="$1/report.html"
out="$2"
size="${3:-1200,2400}"
if [ ! -f "$report" ]; then
  echo "error: no report in $1 (run: edgetb plots $1)" >&2
  exit 2
fi
if ! [[ "$size" =~ ^[0-9]{3,4},[0-9]{3,5}$ ]]; then
  echo "error: WIDTH,HEIGHT must be two numbers of pixels, got '$size'" >&2
  exit 2
fi
browser=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$browser" ]; then
  echo "error: no chromium: apt-get install chromium" >&2
  exit 2
fi
# a profile of its own, removed after: nothing of the user's browser is read or left
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
"$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars \
  --user-data-dir="$profile" --window-size="$size" \
  --screenshot="$(realpath -m "$out")" "file://$(realpath "$report")" 2>/dev/null
[ -s "$out" ] || { echo "error: chromium wrote no screenshot" >&2; exit 1; }
echo "$out"
