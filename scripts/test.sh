#!/usr/bin/env bash
# The project's test command (README, .ci/run): formatting, vet, the import
# rules of DESIGN.md, every test with the race detector (real agent
# processes, real sockets, real PTYs), and a short fuzz of the frame decoder.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*"; }

# gotest DIR ARGS...: go test in DIR, its output kept; when it fails, the
# failures are printed again at the end, where a CI log's tail shows them
# (kube-apiserver's own logging would otherwise bury them).
gotest() {
	local dir=$1 log
	shift
	log=$(mktemp /tmp/nsys-cortex-test.XXXXXX)
	cleanup+=("$log")
	if (cd "$dir" && go test "$@") 2>&1 | tee "$log"; then return 0; fi
	printf '\n== what failed (go test %s, in %s)\n' "$*" "$dir"
	grep -E -A4 -- '--- FAIL|_test\.go:[0-9]+:|^panic:|^FAIL' "$log" | grep -vE '^[IWE][0-9]{4} ' | tail -100
	exit 1
}

cleanup=()
trap 'rm -rf "${cleanup[@]}"' EXIT

step "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
	echo "not gofmt-formatted:"; echo "$unformatted"; exit 1
fi

step "go vet"
go vet ./...

# nsys-cortex as users get it: the light program carrying the full one
# (internal/cli/split.go). Its start test (cmd/nsys-cortex) uses this build.
step "the light build"
go vet -tags cortex_light ./cmd/nsys-cortex ./internal/cli ./internal/archive
go test -count=1 -tags cortex_light ./internal/cli ./internal/archive
split=$(mktemp -d /tmp/nsys-cortex-split.XXXXXX)
cleanup+=("$split")
scripts/build.sh "$split"
export NSYS_CORTEX_SPLIT_DIR="$split"

step "import rules"
go test -count=1 ./internal/archtest
if [ -x ../shared/tools/layercheck ]; then ../shared/tools/layercheck; fi

step "go test -race"
# Where nsbox can run (CI), its tests may not skip.
if [ "${NSYS_CORTEX_REQUIRE_NSBOX:-}" = 1 ]; then export NSYS_CORTEX_REQUIRE_NSBOX; fi
gotest . -race -count=1 -timeout 15m ./...

# kube mode against a real kube-apiserver and etcd, in process, with the
# simulated kubelet (docs/kube.md, "Tests"): a module of its own, so that
# k8s.io/kubernetes stays out of the main module. Its first build takes
# several minutes; later ones reuse Go's build cache.
step "kube mode against a real API server (test/kube)"
(cd test/kube && go vet ./...)
gotest test/kube -count=1 -timeout 10m ./...

# nsbox also runs for users who are not root (rootless: one host uid, no
# cgroups). As root, run its tests again as an unprivileged user.
if [ "$(id -u)" = 0 ] && command -v runuser >/dev/null; then
	step "nsbox tests as an unprivileged user"
	user=nsys-cortex-test
	id "$user" >/dev/null 2>&1 || useradd --system --create-home "$user"
	dir=$(mktemp -d /tmp/nsys-cortex-rootless.XXXXXX)
	cleanup+=("$dir")
	CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$dir/cortex-agent" ./cmd/cortex-agent
	CGO_ENABLED=0 go build -o "$dir/escape" ./internal/sandbox/sandboxtest/testdata/escape
	CGO_ENABLED=0 go build -o "$dir/hostile" ./internal/sandbox/sandboxtest/testdata/hostile
	CGO_ENABLED=0 go build -o "$dir/portserver" ./internal/sandbox/sandboxtest/testdata/portserver
	go test -c -o "$dir/nsbox.test" ./internal/sandbox/nsbox
	chmod -R a+rx "$dir"
	(cd /tmp && runuser -u "$user" -- env NSYS_CORTEX_TEST_AGENT="$dir/cortex-agent" NSYS_CORTEX_TEST_ESCAPE="$dir/escape" NSYS_CORTEX_TEST_HOSTILE="$dir/hostile" NSYS_CORTEX_TEST_PORTSERVER="$dir/portserver" \
		NSYS_CORTEX_REQUIRE_NSBOX="${NSYS_CORTEX_REQUIRE_NSBOX:-}" "$dir/nsbox.test" -test.count=1 -test.timeout 10m)
fi

# A count, not a duration: with a duration Go's fuzzing coordinator can
# fail a clean run with "context deadline exceeded" when a loaded machine
# starves its workers at the deadline (golang/go#75804). 300000 inputs are
# about 10-20 s here.
step "fuzz the frame decoder (${FUZZTIME:=300000x})"
go test ./internal/protocol -run '^$' -fuzz FuzzReader -fuzztime "$FUZZTIME"

# The policy's generated variants of each bypass class (readonly must not
# allow what writes or runs an unlisted program; standard and trusted must
# deny every catastrophic one), a count of inputs each.
step "fuzz the policy (${POLICY_FUZZ:=20000x} inputs a class)"
go test ./internal/policy -run '^$' -fuzz '^FuzzReadonlyClasses$' -fuzztime "$POLICY_FUZZ"
go test ./internal/policy -run '^$' -fuzz '^FuzzCatastrophicClasses$' -fuzztime "$POLICY_FUZZ"

echo; echo "all tests passed"
