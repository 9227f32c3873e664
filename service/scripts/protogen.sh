#!/usr/bin/env bash
# Generates the Go code of every .proto file under service/proto (except
# proto/third_party, which only declares imported types) with pinned tools:
#
#   protogen.sh            regenerate into the module (make proto)
#   protogen.sh -check     regenerate into a temporary directory and fail on any
#                          difference with the committed code (make proto-check)
#
# protoc comes from Debian's protobuf-compiler (scripts/ensure-protoc.sh);
# protoc-gen-go and protoc-gen-go-grpc are installed with `go install` into
# service/.bin at the versions PROTOC_GEN_GO_VERSION and
# PROTOC_GEN_GO_GRPC_VERSION (pinned in the Makefile). The generated headers
# name protoc's version; that line is rewritten to a fixed text so the output
# does not depend on which protoc a machine has.
set -euo pipefail
: "${PROTOC_GEN_GO_VERSION:?set by the Makefile}"
: "${PROTOC_GEN_GO_GRPC_VERSION:?set by the Makefile}"
GO="${GO:-go}"
svc="$(cd "$(dirname "$0")/.." && pwd)"
root="$(cd "$svc/.." && pwd)"
bin="$svc/.bin"
module="github.com/sluicehq/sluice/service"

check=0
case "${1:-}" in
  "") ;;
  -check) check=1 ;;
  *) echo "usage: $0 [-check]" >&2; exit 2 ;;
esac

"$root/scripts/ensure-protoc.sh"

# install a plugin unless service/.bin already holds the pinned version
plugin() { # name package version version-output
  if [ "$("$bin/$1" --version 2>/dev/null || true)" != "$4" ]; then
    echo "protogen: go install $2@$3"
    GOBIN="$bin" GOFLAGS=-mod=mod "$GO" install "$2@$3"
  fi
}
plugin protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go \
  "$PROTOC_GEN_GO_VERSION" "protoc-gen-go $PROTOC_GEN_GO_VERSION"
plugin protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc \
  "$PROTOC_GEN_GO_GRPC_VERSION" "protoc-gen-go-grpc ${PROTOC_GEN_GO_GRPC_VERSION#v}"

cd "$svc/proto"
mapfile -t files < <(find . -name '*.proto' -not -path './third_party/*' | sed 's|^\./||' | LC_ALL=C sort)
if [ "${#files[@]}" -eq 0 ]; then echo "protogen: no .proto files under service/proto" >&2; exit 1; fi

out="$svc"
if [ "$check" = 1 ]; then
  out="$(mktemp -d)"
  trap 'rm -rf "$out"' EXIT
fi

# google.rpc.Status's Go type is genproto's: third_party only declares it.
status_map="Mgoogle/rpc/status.proto=google.golang.org/genproto/googleapis/rpc/status"
PATH="$bin:$PATH" protoc -I . -I third_party -I /usr/include \
  --go_out="$out" --go_opt="module=$module" --go_opt="$status_map" \
  --go-grpc_out="$out" --go-grpc_opt="module=$module" --go-grpc_opt="$status_map" \
  "${files[@]}"

# the generated files, relative to the module root
mapfile -t gen < <(cd "$out" && find . -name '*.pb.go' -not -path './.bin/*' -not -path './proto/*' | sed 's|^\./||' | LC_ALL=C sort)
for f in "${gen[@]}"; do
  sed -i -E \
    -e 's#^// 	protoc +(\(unknown\)|v?[0-9][^ ]*)$#// 	protoc        (any; see service/scripts/protogen.sh)#' \
    -e 's#^// - protoc +(\(unknown\)|v?[0-9][^ ]*)$#// - protoc             (any; see service/scripts/protogen.sh)#' \
    "$out/$f"
done

if [ "$check" = 1 ]; then
  # every generated file must be committed as generated, and no stale
  # generated file may remain
  mapfile -t have < <(cd "$svc" && find . -name '*.pb.go' -not -path './.bin/*' -not -path './proto/*' | sed 's|^\./||' | LC_ALL=C sort)
  status=0
  if [ "${gen[*]}" != "${have[*]}" ]; then
    echo "proto-check: generated files differ from the committed ones:" >&2
    diff <(printf '%s\n' "${have[@]}") <(printf '%s\n' "${gen[@]}") >&2 || true
    status=1
  fi
  for f in "${gen[@]}"; do
    if ! diff -u "$svc/$f" "$out/$f" >&2; then status=1; fi
  done
  if [ "$status" != 0 ]; then
    echo "proto-check: the committed generated code is not current: run make proto" >&2
    exit 1
  fi
  echo "proto-check: ${#gen[@]} generated files are current"
else
  echo "protogen: generated ${gen[*]}"
fi
