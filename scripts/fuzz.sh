#!/usr/bin/env bash
# Runs every fuzz target of every module for FUZZTIME each (default 10s).
# Targets are found, not listed: any `func FuzzX(f *testing.F)` in a _test.go
# file anywhere in the repository is run, so a new one cannot be forgotten.
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZTIME="${FUZZTIME:-10s}"
GO="${GO:-go}"
n=0
while IFS= read -r file; do
  dir=$(dirname "$file")
  for name in $(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*\*testing\.F).*/\1/p' "$file"); do
    echo "==> $dir $name ($FUZZTIME)"
    # -run '^$': the seed corpus of the other tests is not re-run; -fuzz takes
    # one target, anchored so FuzzX does not also match FuzzXY.
    (cd "$dir" && "$GO" test -run '^$' -fuzz "^${name}\$" -fuzztime "$FUZZTIME" .)
    n=$((n + 1))
  done
done < <(git ls-files '*_test.go' | xargs grep -l '^func Fuzz' | sort)
if [ "$n" -eq 0 ]; then
  echo "fuzz: no fuzz targets found" >&2
  exit 1
fi
echo "fuzz: $n targets, $FUZZTIME each"
