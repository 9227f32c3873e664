#!/bin/sh
# make service-demo: start ratelimitd with its defaults (memory store, the
# bundled example rules: 10 checks per minute per user on /api/**), then
# check one user 11 times over gRPC and another 11 times over HTTP, showing
# allowed, warning (above 80% of the limit) and denied. Nothing but Go is
# needed. GRPC_ADDR and HTTP_ADDR change the addresses (loopback defaults).
set -eu
cd "$(dirname "$0")/.."
BIN=./bin/ratelimitd
GRPC_ADDR="${GRPC_ADDR:-127.0.0.1:8081}"
HTTP_ADDR="${HTTP_ADDR:-127.0.0.1:8080}"
LOG="$(mktemp)"

"$BIN" serve --grpc-addr "$GRPC_ADDR" --http-addr "$HTTP_ADDR" --drain-delay 0 2>"$LOG" &
PID=$!
trap 'kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; rm -f "$LOG"' EXIT INT TERM

# Wait until it answers (a peek consumes nothing).
i=0
until "$BIN" check --addr "$GRPC_ADDR" --identifier demo-probe --peek --timeout 500ms >/dev/null 2>&1; do
  i=$((i + 1))
  if [ "$i" -ge 100 ] || ! kill -0 "$PID" 2>/dev/null; then
    echo "ratelimitd did not start:" >&2
    cat "$LOG" >&2
    exit 1
  fi
  sleep 0.1
done
echo "ratelimitd serves gRPC on $GRPC_ADDR and HTTP on $HTTP_ADDR (memory store, bundled example rules)"
echo

echo "== gRPC: ratelimitd check --addr $GRPC_ADDR --identifier bob --endpoint /api/v1/orders (11 times)"
"$BIN" check --addr "$GRPC_ADDR" --identifier bob --endpoint /api/v1/orders -n 11 || true
echo
echo "== HTTP: POST http://$HTTP_ADDR/api/v1/rate-limit/check {\"key_type\":\"user\",\"key_value\":\"carol\",\"endpoint\":\"/api/v1/orders\"} (11 times)"
"$BIN" check --http "http://$HTTP_ADDR" --identifier carol --endpoint /api/v1/orders -n 11 || true
