#!/bin/sh
# make service-demo: start ratelimitd with its defaults (memory store, the
# bundled example rules: 10 checks per minute per user on /api/**), then
# check one user 11 times over gRPC and another 11 times over HTTP, showing
# allowed, warning (above 80% of the limit) and denied. Nothing but Go is
# needed. It serves on 127.0.0.1:8081 (gRPC) and 127.0.0.1:8080 (HTTP), or
# on ports the kernel chooses when those are taken, and prints where.
# GRPC_ADDR and HTTP_ADDR set the addresses, used as given (no fallback);
# RATELIMITD the binary (default bin/ratelimitd, which make builds).
set -eu
cd "$(dirname "$0")/.."
BIN="${RATELIMITD:-./bin/ratelimitd}"
LOG="$(mktemp)"
PID=
trap 'if [ -n "$PID" ]; then kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; fi; rm -f "$LOG"' EXIT INT TERM

# serve starts ratelimitd on $1 (gRPC) and $2 (HTTP) and waits for the line
# saying where it serves; it fails if ratelimitd exits first.
serve() {
  "$BIN" serve --grpc-addr "$1" --http-addr "$2" --drain-delay 0 2>"$LOG" &
  PID=$!
  i=0
  until grep -q 'msg="ratelimitd serving"' "$LOG"; do
    if ! kill -0 "$PID" 2>/dev/null || [ "$i" -ge 200 ]; then
      kill "$PID" 2>/dev/null || true
      wait "$PID" 2>/dev/null || true
      PID=
      return 1
    fi
    i=$((i + 1))
    sleep 0.05
  done
}

# addr prints the address ratelimitd logged for $1 (grpc_addr, http_addr).
addr() {
  sed -n "s/.*msg=\"ratelimitd serving\".* $1=\([^ ]*\).*/\1/p" "$LOG" | head -n 1
}

if ! serve "${GRPC_ADDR:-127.0.0.1:8081}" "${HTTP_ADDR:-127.0.0.1:8080}"; then
  if [ -n "${GRPC_ADDR:-}${HTTP_ADDR:-}" ]; then
    echo "ratelimitd did not start:" >&2
    cat "$LOG" >&2
    exit 1
  fi
  echo "127.0.0.1:8081 or 127.0.0.1:8080 is taken: serving on ports the kernel chooses"
  if ! serve 127.0.0.1:0 127.0.0.1:0; then
    echo "ratelimitd did not start:" >&2
    cat "$LOG" >&2
    exit 1
  fi
fi
GRPC_ADDR="$(addr grpc_addr)"
HTTP_ADDR="$(addr http_addr)"

# Wait until it answers (a peek consumes nothing).
i=0
until "$BIN" check --addr "$GRPC_ADDR" --identifier demo-probe --peek --timeout 500ms >/dev/null 2>&1; do
  i=$((i + 1))
  if [ "$i" -ge 100 ] || ! kill -0 "$PID" 2>/dev/null; then
    echo "ratelimitd did not answer:" >&2
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
