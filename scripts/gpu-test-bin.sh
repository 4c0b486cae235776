#!/usr/bin/env bash
# Builds the gpu-tagged test binaries (one per package that has tests) into .gpu/,
# plus .gpu/run.sh, which runs them all on a GPU machine and prints each summary.
# libcuda is dlopened at run time, so nothing from CUDA is needed to build.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .gpu && mkdir -p .gpu
export CGO_ENABLED=1
pkgs=$(go list -tags gpu -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}}{{end}}' ./...)
for p in $pkgs; do
  name=$(echo "${p#github.com/vyre-go/vyrecuda}" | sed 's#^/##; s#/#_#g')
  [ -n "$name" ] || name=root
  go test -c -tags gpu -o ".gpu/$name.test" "$p"
done
# Non-test helper binaries the GPU run needs (the command, when it exists).
if [ -d cmd/vyrecuda ]; then go build -o .gpu/vyrecuda ./cmd/vyrecuda; fi
cat > .gpu/run.sh <<'RUN'
#!/usr/bin/env bash
# Runs every gpu-tagged test binary in this folder; exits non-zero if any failed.
# Extra arguments are passed to every binary (e.g. -test.run Conformance).
cd "$(dirname "$0")"
status=0
for t in ./*.test; do
  echo "=== $t"
  if "$t" -test.v -test.count=1 "$@" > "$t.log" 2>&1; then
    echo "ok   $t ($(grep -c '^--- PASS' "$t.log") passed, $(grep -c '^--- SKIP' "$t.log") skipped)"
  else
    status=1
    echo "FAIL $t"; grep -E '^(--- FAIL|panic|\s+.*_test.go:[0-9]+)' "$t.log" | head -40
  fi
done
exit $status
RUN
chmod +x .gpu/run.sh
echo "built $(ls .gpu/*.test | wc -l) test binaries into .gpu/"
