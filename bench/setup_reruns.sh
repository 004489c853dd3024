#!/usr/bin/env bash
# scripts/setup run N times in a row (default 200) on this prepared checkout, with apt-get,
# sudo and pip on PATH replaced by stand-ins that record any call and fail: a rerun must only
# check. Prints one table row per mode: runs, failures, apt/sudo/pip calls, median and spread
# of one run's time. Usage: bench/setup_reruns.sh [N]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-200}
scripts/setup >/dev/null   # prepare first (this may install)
shims=$(mktemp -d)
trap 'rm -rf "$shims"' EXIT
for name in apt-get sudo pip pip3; do
  printf '#!/bin/sh\necho "%s $*" >> "%s/calls"\nexit 97\n' "$name" "$shims" > "$shims/$name"
  chmod +x "$shims/$name"
done
printf '%-10s %5s %8s %6s %10s %10s %10s\n' MODE RUNS FAILURES CALLS MEDIAN_MS MIN_MS MAX_MS
for mode in full minimal; do
  args=(); [ "$mode" = minimal ] && args=(--minimal)
  : > "$shims/calls"
  failures=0
  times=()
  for _ in $(seq "$runs"); do
    start=$(date +%s%N)
    if ! PATH="$shims:$PATH" scripts/setup "${args[@]}" > "$shims/out" 2>&1 || [ -s "$shims/out" ]; then
      failures=$((failures + 1))
    fi
    times+=($(( ($(date +%s%N) - start) / 1000000 )))
  done
  sorted=$(printf '%s\n' "${times[@]}" | sort -n)
  median=$(sed -n "$(( (runs + 1) / 2 ))p" <<< "$sorted")
  printf '%-10s %5d %8d %6d %10d %10d %10d\n' "$mode" "$runs" "$failures" "$(wc -l < "$shims/calls")" \
    "$median" "$(head -n1 <<< "$sorted")" "$(tail -n1 <<< "$sorted")"
done
