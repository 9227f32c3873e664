#!/usr/bin/env bash
# Installs protoc and the well-known types' .proto files (google/protobuf/*.proto
# under /usr/include) from Debian's packages when they are missing, so that
# `make proto` and `make proto-check` work on a fresh machine. The Go plugins
# (protoc-gen-go, protoc-gen-go-grpc) are pinned in the Makefile and installed
# with `go install`, not here.
set -euo pipefail
if command -v protoc >/dev/null 2>&1 && [ -f /usr/include/google/protobuf/timestamp.proto ]; then
  exit 0
fi
echo "ensure-protoc: installing protobuf-compiler and libprotobuf-dev from Debian's packages"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends protobuf-compiler libprotobuf-dev >/dev/null
command -v protoc >/dev/null && [ -f /usr/include/google/protobuf/timestamp.proto ]
echo "ensure-protoc: $(protoc --version)"
