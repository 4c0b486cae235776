#!/usr/bin/env bash
# Checks that the bindings hold for every CUDA header in a folder: for each
# DIR/*/cuda.h it copies the working tree (tracked and untracked, not ignored
# files) into a temporary folder, regenerates cudaapi there from that header,
# and runs go build, go vet (with and without the gpu tag, and without cgo)
# and the gen and cudaapi tests. It also compares the generated Go functions
# and the C signatures they call with the committed bindings: the Go API must
# not depend on the header. The headers are never copied into the tree.
#
# Usage: scripts/check-headers.sh DIR   (make check-headers CUDA_HEADERS=DIR)
set -euo pipefail
dir=${1:?usage: check-headers.sh DIR (each DIR/*/cuda.h is checked)}
cd "$(dirname "$0")/.."
root=$(pwd)
dir=$(cd "$dir" && pwd)
shopt -s nullglob
headers=("$dir"/*/cuda.h)
if [ ${#headers[@]} -eq 0 ]; then
  echo "check-headers: no $dir/*/cuda.h found; Fix: put each header at DIR/NAME/cuda.h (see gen/README.md, Checking every supported header)" >&2
  exit 1
fi

# apiLines prints what must not depend on the header: the wrappers' Go
# signatures and the C function types they call through.
apiLines() { grep -E '^func [A-Za-z]|^typedef int \(\*vyre_' "$1"; }

# checkOne regenerates and checks the tree copy in $tmp against header $h.
checkOne() {
  cd "$tmp"
  (cd cudaapi && go run ../gen -header "$h" -out . 2> "$tmp/gen.log") || { cat "$tmp/gen.log"; exit 1; }
  grep -v ' is not declared in this ' "$tmp/gen.log" | grep -v '^gen: warning: enum \|^gen: warning: macro \|^gen: warning: flag enum ' || true
  if ! diff <(apiLines "$root/cudaapi/zdriver_cgo.go") <(apiLines cudaapi/zdriver_cgo.go); then
    echo "check-headers: $name changes the Go API or a C signature (lines above: < committed, > $name)"
    exit 1
  fi
  go build ./...
  go vet ./...
  go vet -tags gpu ./...
  CGO_ENABLED=0 go vet ./cudaapi ./core/...
  CUDA_H="$h" go test -count=1 ./gen ./cudaapi
}

failed=()
for h in "${headers[@]}"; do
  name=$(basename "$(dirname "$h")")
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  echo "== $name ($h)"
  git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
    [ -e "$f" ] && printf '%s\0' "$f"
  done | tar --null -T - -cf - | tar -xf - -C "$tmp"
  # errexit does not apply inside a subshell that is an if's condition (that
  # hid failing builds), so the checks run as a plain command with it on.
  set +e
  (set -e; checkOne)
  rc=$?
  set -e
  if [ $rc -ne 0 ]; then
    failed+=("$name")
  fi
  rm -rf "$tmp"
  trap - EXIT
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "check-headers: FAILED for: ${failed[*]}" >&2
  exit 1
fi
echo "check-headers: ${#headers[@]} header(s) passed: build, vet (gpu tag, no cgo), gen and cudaapi tests, same Go API"
