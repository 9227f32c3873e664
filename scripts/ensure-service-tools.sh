#!/usr/bin/env bash
# Installs the tools the service module's tests drive ratelimitd with into
# service/.bin, when missing, so that `make test` runs them on a fresh
# machine: envoyproxy/ratelimit's gRPC client (client_cmd), which the Envoy
# RLS tests (service/envoyrls) run against ratelimitd's ShouldRateLimit, and
# its config checker (config_check_cmd), which proves that the Envoy-format
# rules files of those tests are ones envoyproxy/ratelimit accepts.
# Versions are pinned; a different pin reinstalls.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="$PWD/service/.bin"
GO="${GO:-go}"
mkdir -p "$BIN"

# envoyproxy/ratelimit's client, at a pinned commit.
EN_VERSION=v1.4.1-0.20260122083618-3fb702589d36
for cmd in client_cmd config_check_cmd service_cmd; do
  if [ ! -x "$BIN/$cmd" ] || [ "$(cat "$BIN/$cmd.version" 2>/dev/null)" != "$EN_VERSION" ]; then
    echo "ensure-service-tools: installing envoyproxy/ratelimit $cmd@$EN_VERSION into service/.bin"
    GOBIN="$BIN" GOFLAGS=-mod=mod "$GO" install "github.com/envoyproxy/ratelimit/src/$cmd@$EN_VERSION"
    echo "$EN_VERSION" >"$BIN/$cmd.version"
  fi
done
