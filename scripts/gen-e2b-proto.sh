#!/bin/sh
# Regenerates the Go code of the E2B envd protocol (internal/e2b/proto).
# Needs protoc (Debian: protobuf-compiler) and the two generators, pinned
# to the versions go.mod uses:
#   go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
#   go install connectrpc.com/connect/cmd/protoc-gen-connect-go@v1.21.1
set -eu
cd "$(dirname "$0")/../internal/e2b/proto"
protoc -I . \
	--go_out=. --go_opt=paths=source_relative \
	--connect-go_out=. --connect-go_opt=paths=source_relative \
	process/process.proto filesystem/filesystem.proto
