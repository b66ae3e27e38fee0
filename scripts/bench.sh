#!/usr/bin/env bash
# The benchmarks behind docs/benchmarks.md. Each one measures its baseline
# (fork+exec, plain file I/O) in the same run.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-300}
# The CLI as scripts run it: the build users get, beside /bin/true and a
# Go program that does nothing (docs/benchmarks.md).
scripts/build.sh bin
NSYS_CORTEX_SPLIT_DIR="$PWD/bin" go test ./cmd/nsys-cortex -run '^$' -benchtime 100x -bench 'BenchmarkCLI$'
NSYS_CORTEX_SPLIT_DIR="$PWD/bin" go test ./cmd/nsys-cortex -run '^$' -benchtime 30x -bench 'BenchmarkCLICopy|BenchmarkPeers'
go test ./internal/sandbox/process -run '^$' -benchtime "${N}x" \
	-bench 'Suite/(ExecTrue|ChannelRoundTrip|CreateToFirstExec)$'
go test ./internal/sandbox/process -run '^$' -benchtime 20x -bench 'Suite/File64M'
go test ./internal/sandbox/process -run '^$' -benchtime 3x -bench 'Suite/Idle$'
go test ./internal/link -run '^$' -benchtime 2s -bench .
# The tool kit, policy, MCP and the agent loop (docs/benchmarks.md).
go test ./internal/link -run '^$' -benchtime 10x -bench 'Search20k'
go test ./internal/tools -run '^$' -benchtime 50x -bench 'File1MiB'
go test ./internal/mcp -run '^$' -benchtime 1000x -bench 'ToolCall'
go test ./internal/policy -run '^$' -bench 'CheckBash'
go test ./internal/loop -run '^$' -benchtime 500x -bench 'TurnOverhead'
go test ./internal/session -run '^$' -bench .
# /ctx over FUSE (root; docs/benchmarks.md).
go test ./internal/ctxfs -run '^$' -benchtime 20000x -bench 'StatusRead'
go test ./internal/ctxfs -run '^$' -benchtime 50x -bench 'Ls1000'
go test ./internal/ctxfs -run '^$' -benchtime 1x -bench 'Memory100kReads'
