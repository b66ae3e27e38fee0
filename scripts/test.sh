#!/usr/bin/env bash
# The project's test command (README, .ci/run): formatting, vet, the import
# rules of DESIGN.md, every test with the race detector (real agent
# processes, real sockets, real PTYs), and a short fuzz of the frame decoder.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*"; }

step "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
	echo "not gofmt-formatted:"; echo "$unformatted"; exit 1
fi

step "go vet"
go vet ./...

step "import rules"
go test -count=1 ./internal/archtest
if [ -x ../shared/tools/layercheck ]; then ../shared/tools/layercheck; fi

step "go test -race"
go test -race -count=1 -timeout 15m ./...

step "fuzz the frame decoder (${FUZZTIME:=20s})"
go test ./internal/protocol -run '^$' -fuzz FuzzReader -fuzztime "$FUZZTIME"

echo; echo "all tests passed"
