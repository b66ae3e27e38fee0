#!/usr/bin/env bash
# The benchmarks behind docs/benchmarks.md. Each one measures its baseline
# (fork+exec, plain file I/O) in the same run.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-300}
go test ./internal/sandbox/process -run '^$' -benchtime "${N}x" \
	-bench 'ExecTrue|ChannelRoundTrip|CreateToFirstExec'
go test ./internal/sandbox/process -run '^$' -benchtime 20x -bench 'File64M'
go test ./internal/sandbox/process -run '^$' -benchtime 3x -bench 'IdleAgent'
go test ./internal/link -run '^$' -benchtime 2s -bench .
