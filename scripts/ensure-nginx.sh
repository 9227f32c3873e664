#!/usr/bin/env bash
# Installs nginx from Debian's packages when it is missing, so that `make test`
# runs the service's nginx tests (service/internal/attack) on a fresh machine.
# The tests start their own nginx processes (nginx -p <tmp> -c <conf>) on free
# loopback ports and never use a system instance.
set -euo pipefail
if command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ]; then
  exit 0
fi
echo "ensure-nginx: installing nginx from Debian's packages"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends nginx >/dev/null
# The package may start a system nginx on port 80: stop it and keep it from
# starting at boot (the tests neither need nor want it; where no init system
# runs, both commands fail harmlessly).
if command -v systemctl >/dev/null 2>&1; then
  $SUDO systemctl disable --now nginx >/dev/null 2>&1 || true
fi
$SUDO service nginx stop >/dev/null 2>&1 || true
test -x /usr/sbin/nginx
echo "ensure-nginx: $(/usr/sbin/nginx -v 2>&1)"
