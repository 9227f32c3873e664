#!/usr/bin/env bash
# Installs the PostgreSQL server from Debian's packages when it is missing, so
# that `make test` runs the service's PostgreSQL tests on a fresh machine
# (service/internal/pgtest starts its own servers with initdb and postgres
# from /usr/lib/postgresql/*/bin). When run as root it also creates the
# unprivileged system user sluicepg, because initdb and postgres refuse to run
# as root and pgtest runs them as that user.
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
  echo "ensure-postgres: installing postgresql from Debian's packages"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends postgresql >/dev/null
  # The package may create and start a system cluster on 5432; the tests start
  # their own servers on free loopback ports and never use it.
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null
  echo "ensure-postgres: $(ls -d /usr/lib/postgresql/*/bin/postgres | tail -1) installed"
fi
if [ "$(id -u)" -eq 0 ] && ! id -u sluicepg >/dev/null 2>&1; then
  echo "ensure-postgres: creating system user sluicepg (initdb and postgres refuse to run as root)"
  useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin sluicepg
fi
