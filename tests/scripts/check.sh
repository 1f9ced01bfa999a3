# shellcheck shell=bash
# Sourced by the script tests: check DESCRIPTION COMMAND... runs COMMAND, prints ok or FAILED and
# counts it in passed / failed; check_summary NAME prints the counts and fails if any check did.
passed=0 failed=0
check() {
  local what=$1
  shift
  if "$@"; then
    passed=$((passed + 1)); echo "  ok: $what"
  else
    failed=$((failed + 1)); echo "  FAILED: $what"
  fi
}
check_summary() {
  echo "$1: $passed passed, $failed failed"
  [ "$failed" -eq 0 ]
}
