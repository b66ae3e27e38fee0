#!/usr/bin/env bash
# The main job, end to end: build, create a neuron in the best mode this
# machine has, run commands in it, and show a file surviving destroy and
# create under the same id. Uses a throwaway home unless NSYS_CORTEX_HOME is set.
set -euo pipefail
cd "$(dirname "$0")/.."
make build >/dev/null
cx=./bin/nsys-cortex
if [ -z "${NSYS_CORTEX_HOME:-}" ]; then
	export NSYS_CORTEX_HOME=$(mktemp -d /tmp/nsys-cortex-demo.XXXXXX)
	trap 'rm -rf "$NSYS_CORTEX_HOME"' EXIT
fi
say() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }
run() { say "$*"; "$@"; }

run $cx version
run $cx doctor
say "$cx create demo"
if ! $cx create demo 2>/tmp/nsys-cortex-demo.err; then
	cat /tmp/nsys-cortex-demo.err
	echo
	echo "No isolating mode can run on this machine (see doctor above), so the demo uses"
	echo "process mode, which is NOT a security boundary (commands run as you). It needs consent:"
	say "export NSYS_CORTEX_ALLOW_INSECURE_DEV=1"
	export NSYS_CORTEX_ALLOW_INSECURE_DEV=1
	run $cx create demo
else
	cat /tmp/nsys-cortex-demo.err
fi
rm -f /tmp/nsys-cortex-demo.err
run $cx list
run $cx exec demo -- sh -c 'echo "hello from $(hostname), in $(pwd), as $(id -un)"; uname -sr'
run $cx exec demo -- sh -c 'echo "written at $(date -u +%T)" > notes.txt; mkdir -p .cache && echo cached > .cache/pkg'
run $cx exec demo -- sh -c 'ps -e; ls /home /root 2>&1 | head -3' 
say "echo 'some input' | $cx exec demo -- tr a-z A-Z"
echo 'some input' | $cx exec demo -- tr a-z A-Z
say "$cx exec demo -- sh -c 'exit 42'; echo \"exit status: \$?\""
$cx exec demo -- sh -c 'exit 42' || echo "exit status: $?"
run $cx exec demo -- mkdir -p docs
run $cx cp README.md demo:docs/
run $cx exec demo -- ls -la docs
run $cx destroy demo
run $cx status demo
run $cx create demo
run $cx exec demo -- cat notes.txt .cache/pkg
run $cx destroy --wipe demo
echo
echo "The file written before destroy was there after create: persistence works."
