#!/usr/bin/env bash
# Installs redis-server and redis-cli from Debian's packages when they are
# missing, so that `make test` runs the Redis tests on a fresh machine.
set -euo pipefail
if command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1; then
  exit 0
fi
echo "ensure-redis: installing redis-server and redis-tools from Debian's packages"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends redis-server redis-tools >/dev/null
# The package may start a system instance on 6379; the tests start their own
# servers on free loopback ports and never use it.
command -v redis-server >/dev/null && command -v redis-cli >/dev/null
echo "ensure-redis: $(redis-server --version)"
