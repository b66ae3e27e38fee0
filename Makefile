# Nsys Cortex build. `make` builds bin/nsys-cortex with the static agent
# and the full program embedded (and bin/cortex-agent beside it); `make test` runs every test.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)
GO ?= go

.PHONY: all build agent test race fuzz bench lint clean demo devcluster

all: build

agent:
	mkdir -p bin
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/cortex-agent ./cmd/cortex-agent

# bin/nsys-cortex: the light program with the agent and the full program
# embedded (scripts/build.sh; internal/cli/split.go says why).
build:
	VERSION=$(VERSION) scripts/build.sh bin

# The test command (README, .ci/run): vet, the import rules, and every test
# with the race detector against real agent processes.
test:
	scripts/test.sh

# Static checks (README, .ci/run): go vet and staticcheck, at the version
# go.mod pins as a tool, so there is nothing to install.
lint:
	$(GO) vet ./...
	$(GO) vet -tags cortex_light ./cmd/nsys-cortex ./internal/cli ./internal/archive
	$(GO) tool staticcheck ./...

# The fuzzers of docs/security.md's table, one after another, FUZZTIME each
# (the figures there are of FUZZTIME=10m).
fuzz:
	$(GO) test ./internal/protocol -run '^$$' -fuzz '^FuzzReader$$' -fuzztime $${FUZZTIME:-2m}
	$(GO) test ./internal/api -run '^$$' -fuzz '^FuzzDecodeJSON$$' -fuzztime $${FUZZTIME:-2m}
	$(GO) test ./internal/policy -run '^$$' -fuzz '^FuzzCheck$$' -fuzztime $${FUZZTIME:-2m}
	$(GO) test ./internal/tools/patch -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $${FUZZTIME:-2m}
	$(GO) test ./internal/agent/egress -run '^$$' -fuzz '^FuzzProxyRequest$$' -fuzztime $${FUZZTIME:-2m}

bench:
	scripts/bench.sh

demo: build
	scripts/demo.sh

clean:
	rm -rf bin internal/agentbin/cortex-agent.bin internal/fullbin/nsys-cortex-full.gz

# A control plane for trying kube mode on this machine (docs/kube.md,
# "Trying it"): make devcluster FILE=/tmp/cortex-dev.kubeconfig
devcluster:
	$(GO) -C test/kube run ./devcluster --kubeconfig $(abspath $(or $(FILE),cortex-dev.kubeconfig))
