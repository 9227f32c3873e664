#!/usr/bin/env bash
# Installs Chromium from Debian's packages when no chromium, chromium-browser,
# google-chrome or google-chrome-stable is on PATH, so that `make test` runs
# the browser test of ratelimitd's admin page (service/adminui) on a fresh
# machine. The test drives the browser headless with chromedp; it needs no
# display.
set -euo pipefail
for b in chromium chromium-browser google-chrome google-chrome-stable; do
  if command -v "$b" >/dev/null 2>&1; then
    exit 0
  fi
done
echo "ensure-chromium: installing chromium from Debian's packages"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends chromium >/dev/null
command -v chromium >/dev/null
echo "ensure-chromium: $(chromium --version 2>/dev/null || echo chromium installed)"
