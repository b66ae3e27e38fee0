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
# Issue 20's figures: exec through the channel in nsbox and over HTTP,
# PTY output through attach against a raw PTY read, 1000 idle nsbox
# neurons, 100 idle docker neurons (skipped without a daemon).
go test ./internal/sandbox/nsbox -run '^$' -benchtime "${N}x" -bench 'Suite/ExecTrue$'
go test ./internal/api -run '^$' -benchtime "${N}x" -bench 'HTTPExecTrue'
go test ./internal/term -run '^$' -benchtime 3x -bench 'AttachThroughput'
NSYS_CORTEX_BENCH_NEURONS=1000 go test ./internal/sandbox/nsbox -run '^$' -benchtime 1x -timeout 30m -bench 'IdleNeurons'
NSYS_CORTEX_BENCH_NEURONS=100 go test ./internal/sandbox/docker -run '^$' -benchtime 1x -timeout 30m -bench 'IdleNeurons'
# Issue 21's figures: the port proxy against a direct loopback request,
# a 256 MiB download through it against the same straight.
go test ./internal/api -run '^$' -benchtime "${N}x" -bench 'PortProxy/Small'
go test ./internal/api -run '^$' -benchtime 5x -bench 'PortProxy/Download'
go test ./internal/archive -run '^$' -benchtime 3x -bench 'Archive1GiB'
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
