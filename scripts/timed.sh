#!/usr/bin/env bash
# Run one stage of the build/test pipeline and print how long it took.
# Usage: scripts/timed.sh "stage name" command args...
set -u
name=$1; shift
start=$(date +%s)
echo "=== stage: ${name} ==="
"$@"
rc=$?
end=$(date +%s)
echo "=== stage: ${name}: $((end - start)) s (exit ${rc}) ===" 
if [ -n "${STAGE_LOG:-}" ]; then printf '%-40s %5d s  exit %d\n' "$name" "$((end - start))" "$rc" >> "$STAGE_LOG"; fi
exit $rc
