#!/bin/sh
# promtool checks for ctest. Exits 77 (ctest's SKIP_RETURN_CODE) when promtool is missing, so a
# machine without the Debian package 'prometheus' skips these tests instead of failing them.
#
#   promtool_check.sh exposition PROGRAM   run PROGRAM, lint its output with `promtool check metrics`
#   promtool_check.sh ARGS...              run `promtool ARGS...` (check rules, test rules, ...)
set -eu
if ! command -v promtool >/dev/null 2>&1; then
  echo "SKIP: promtool not found; install the Debian package 'prometheus' (scripts/setup --test)"
  exit 77
fi
if [ "$1" = exposition ]; then
  out=$(mktemp)
  trap 'rm -f "$out"' EXIT
  if ! "$2" >"$out"; then
    echo "FAIL: $2 exited with an error"
    exit 1
  fi
  echo "$(grep -c '^# TYPE' "$out") metric families, $(grep -vc '^#' "$out") samples from $2"
  # promtool prints lint problems and exits non-zero on them as well as on parse errors.
  if ! promtool check metrics <"$out"; then
    echo "FAIL: promtool check metrics rejected the exposition above"
    exit 1
  fi
  echo "promtool check metrics: OK"
  exit 0
fi
exec promtool "$@"
