#!/usr/bin/env bash
# Installs the tools the deploy/ module's tests run, from Debian's packages,
# when they are missing, so that `make test` runs them on a fresh machine:
#   - promtool (Debian's prometheus package), which checks the alerting
#     rules and runs their unit tests (promtool test rules);
#   - systemd-analyze (Debian's systemd package), which verifies the unit.
# A prebuilt promtool from the distribution installs in seconds; building
# it from the Go module proxy means compiling Prometheus's whole service
# discovery tree (cloud SDKs, Kubernetes' client) on every fresh machine.
# The package may start a system Prometheus on :9090: it is stopped and kept
# from starting at boot (the tests never use it).
set -euo pipefail
want=()
command -v promtool >/dev/null 2>&1 || want+=(prometheus)
command -v systemd-analyze >/dev/null 2>&1 || want+=(systemd)
if [ "${#want[@]}" -eq 0 ]; then
  exit 0
fi
echo "ensure-deploy-tools: installing ${want[*]} from Debian's packages"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${want[@]}" >/dev/null
if [[ " ${want[*]} " == *" prometheus "* ]]; then
  if command -v systemctl >/dev/null 2>&1; then
    $SUDO systemctl disable --now prometheus >/dev/null 2>&1 || true
  fi
  $SUDO service prometheus stop >/dev/null 2>&1 || true
fi
command -v promtool >/dev/null && command -v systemd-analyze >/dev/null
echo "ensure-deploy-tools: $(promtool --version 2>&1 | head -1); $(systemd-analyze --version | head -1)"
