# sluice: every target works on a fresh machine with Go installed.
GO      ?= go
# Every module of the repository (the root and the nested adapter, example
# and bench modules): `go test ./...` does not cross a nested go.mod.
MODULES := $(shell find . -name go.mod -not -path './.git/*' -exec dirname {} \; | sort)
# Under `make test` a Redis or PostgreSQL test that cannot start its server fails.
export SLUICE_REQUIRE_REDIS ?= 1
export SLUICE_REQUIRE_POSTGRES ?= 1
# ... and the browser test of the admin page fails when no Chromium is found.
export SLUICE_REQUIRE_CHROMIUM ?= 1
# ... and the tests behind a real nginx (service/internal/attack) fail when no
# nginx is found.
export SLUICE_REQUIRE_NGINX ?= 1
# ... and deploy/'s tests fail when promtool or systemd-analyze is missing.
export SLUICE_REQUIRE_DEPLOY_TOOLS ?= 1

.PHONY: test deps lint bench load demo fuzz accuracy attack proto proto-check openapi ratelimitd service-demo admin-demo fleet-demo

# The service packages whose tests pin allocations that rest on pooled
# memory: they skip under -race, so make test runs them once more without it.
ALLOC_PINS := ./engine ./grpcapi

## test: install what the tests need, then run every module's tests with -race
## (deploy/ without it: its tests check configuration files with their tools
## and types, no code of its own runs concurrently, and a race build of
## k8s.io/api, go-control-plane and Prometheus would cost minutes on a fresh
## machine)
test: deps
	@set -e; for m in $(MODULES); do \
		echo "==> go test $$m"; \
		race=-race; [ "$$m" = ./deploy ] && race=; \
		(cd $$m && $(GO) test $$race -shuffle=on -count=1 -timeout 9m ./...); \
	done
	@echo "==> allocation pins without the race detector (it drops pooled memory at random)"
	@cd service && $(GO) test -count=1 -timeout 5m -run 'Allocations$$' $(ALLOC_PINS)

## attack: the attack suite (internal/attack, also run by `make test`), verbose:
## every way a hostile client could get past a limit (idempotency,
## disconnects, missing keys, path variants, panicking keys, retained
## strings, spoofed forwarding, key floods) against every adapter, on memory
## and on a real Redis
attack: deps
	cd internal/attack && $(GO) test -race -shuffle=on -count=1 -v -timeout 5m ./...

## deps: redis-server and redis-cli, PostgreSQL, Chromium, nginx, promtool
## (prometheus) and systemd-analyze (systemd) from Debian's packages when
## missing, and the tools the service's tests drive ratelimitd with
## (envoyproxy/ratelimit's client and config checker, pinned, into
## service/.bin)
deps:
	@./scripts/ensure-redis.sh
	@./scripts/ensure-postgres.sh
	@./scripts/ensure-chromium.sh
	@./scripts/ensure-nginx.sh
	@./scripts/ensure-deploy-tools.sh
	@GO=$(GO) ./scripts/ensure-service-tools.sh

## lint: gofmt, go vet and go mod tidy -diff on every module
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt:"; echo "$$out"; exit 1; fi
	@set -e; for m in $(MODULES); do (cd $$m && $(GO) vet ./...); done
	@set -e; for m in $(MODULES); do (cd $$m && $(GO) mod tidy -diff >/dev/null) || { echo "go mod tidy needed in $$m"; exit 1; }; done
	@bins=$$(git ls-files | while IFS= read -r f; do [ -f "$$f" ] && [ "$$(head -c 4 "$$f" | od -An -c | tr -d ' \n')" = '177ELF' ] && echo "$$f"; done; true); \
	  if [ -n "$$bins" ]; then echo "compiled binaries are tracked (go build leaves them; add them to .gitignore):"; echo "$$bins"; exit 1; fi

## bench: sluice against its peers, side by side in one run; writes
## docs/benchmarks.md and docs/benchmarks.svg (about 8 minutes; a quick look:
## make bench BENCHFLAGS=-quick)
BENCHFLAGS ?=
bench: deps
	cd bench && $(GO) run ./cmd/report -out ../docs $(BENCHFLAGS)

## accuracy: replay traffic traces against the six algorithms and an exact
## sliding log; rewrites the results in docs/algorithms.md and its SVG chart
accuracy:
	cd bench && $(GO) run ./cmd/accuracy -scale full -out ../docs

## load: 200 concurrent clients for 30 s against the net/http example on a
## real Redis (behind the guard); prints the status counts, p99, heap and
## goroutines (SLUICE_LOAD_DURATION and SLUICE_LOAD_CLIENTS change the run)
load: deps
	cd examples && SLUICE_LOAD_DURATION=$${SLUICE_LOAD_DURATION:-30s} $(GO) test -run '^TestLoad$$' -count=1 -v -timeout 10m ./nethttp

## demo: run the net/http example (in memory; REDIS_ADDR=host:port for Redis)
## and fire a burst at it, showing Normal, Warning and Throttled
demo:
	@mkdir -p bin
	@cd examples && $(GO) build -o ../bin/sluice-nethttp ./nethttp && $(GO) build -o ../bin/sluice-burst ./burst
	@./bin/sluice-burst -n 12 -path /hello -- ./bin/sluice-nethttp

## ratelimitd: build the rate-limit service into bin/ratelimitd
ratelimitd:
	@mkdir -p bin
	@cd service && $(GO) build -o ../bin/ratelimitd ./cmd/ratelimitd

## service-demo: start ratelimitd (memory store, bundled example rules) and
## check one user 11 times over gRPC and one over HTTP, showing allowed,
## warning and denied; on 127.0.0.1:8081 (gRPC) and :8080 (HTTP), or on
## ports the kernel chooses when those are taken (GRPC_ADDR, HTTP_ADDR:
## addresses of your choice, used as given)
service-demo: ratelimitd
	@./scripts/service-demo.sh

## admin-demo: ratelimitd on one machine, its rules in SQLite: serve --db
## file:<tmp>/rules.db, a write token (ratelimitd token create), a rule
## created, changed (PUT with If-Match) and overridden for one user through
## the admin API, checks allowed then denied, the audit, the /admin/ URL;
## then everything stopped (ADMIN_DEMO_KEEP=1: served until Ctrl-C)
admin-demo: ratelimitd
	@cd service && $(GO) run ./internal/demo/admindemo -ratelimitd ../bin/ratelimitd

## fleet-demo: ratelimitd as a fleet: a throwaway PostgreSQL and Redis
## (Debian's packages, installed when missing) on loopback ports, a write
## token, instances A and B (serve --db postgres://... --redis redis://...
## --rules-cache ...), a rule created through A, checks alternately on A
## and B admitting exactly the limit, a PUT on A and the time until B
## decides under it; then everything stopped and removed
fleet-demo: ratelimitd
	@./scripts/ensure-redis.sh
	@./scripts/ensure-postgres.sh
	@cd service && $(GO) run ./internal/demo/fleetdemo -ratelimitd ../bin/ratelimitd

## fuzz: a short run of every fuzz target of every module (found by
## scripts/fuzz.sh, not listed here), FUZZTIME each (make fuzz FUZZTIME=1m)
FUZZTIME ?= 10s
fuzz:
	@GO=$(GO) FUZZTIME=$(FUZZTIME) ./scripts/fuzz.sh

## proto: regenerate the Go code of service/proto (service/ratelimitv1) with
## pinned tools: protoc from Debian's protobuf-compiler (installed when
## missing), protoc-gen-go and protoc-gen-go-grpc installed into service/.bin
PROTOC_GEN_GO_VERSION      := v1.36.11
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2
PROTOGEN := GO=$(GO) PROTOC_GEN_GO_VERSION=$(PROTOC_GEN_GO_VERSION) \
	PROTOC_GEN_GO_GRPC_VERSION=$(PROTOC_GEN_GO_GRPC_VERSION) ./service/scripts/protogen.sh
proto:
	@$(PROTOGEN)

## proto-check: fail when the committed generated code differs from what
## `make proto` generates (run by CI)
proto-check:
	@$(PROTOGEN) -check

## openapi: regenerate service/apiclient, the Go client of ratelimitd's HTTP
## APIs, from service/openapi/openapi.json with the service module's pinned
## oapi-codegen (a go.mod tool dependency, from the Go module proxy); a test
## of service/apiclient (run by `make test`) fails while the committed
## client is not what this generates
openapi:
	@cd service && $(GO) generate ./apiclient
