#!/usr/bin/env bash
# Builds nsys-cortex as users get it (make build): one file holding two
# programs (internal/cli/split.go). The agent first (static), embedded in
# both; the full program, gzip-compressed; then the light program, which
# embeds the full one and runs it for the commands it does not link.
#   scripts/build.sh [OUTDIR]   (default bin; writes OUTDIR/cortex-agent and OUTDIR/nsys-cortex)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bin}
mkdir -p "$out"
version=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
ldflags="-s -w -X main.version=$version"
export CGO_ENABLED=0

go build -trimpath -ldflags "$ldflags" -o "$out/cortex-agent" ./cmd/cortex-agent
cp "$out/cortex-agent" internal/agentbin/cortex-agent.bin

full=$(mktemp "$out/.nsys-cortex-full.XXXXXX")
trap 'rm -f "$full"' EXIT
go build -trimpath -tags cortex_embed_agent -ldflags "$ldflags" -o "$full" ./cmd/nsys-cortex
gzip -n -c "$full" > internal/fullbin/nsys-cortex-full.gz
sum=$(sha256sum internal/fullbin/nsys-cortex-full.gz | cut -c1-64)

go build -trimpath -tags 'cortex_embed_agent cortex_embed_full cortex_light' \
	-ldflags "$ldflags -X github.com/nsys-cortex/cortex/internal/fullbin.sum=$sum" -o "$out/nsys-cortex" ./cmd/nsys-cortex
