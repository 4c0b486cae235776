#!/usr/bin/env bash
# Builds the test binaries of every package that has gpu-tagged tests into .gpu/
# (with the `gpu` tag, so each binary holds that package's CPU tests too), the
# vyrecuda command, and .gpu/run.sh, which runs them all on a GPU machine and
# prints each summary. Packages without GPU tests are covered by `make test`.
# libcuda is dlopened at run time, so nothing from CUDA is needed to build.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .gpu && mkdir -p .gpu
export CGO_ENABLED=1
pkgs=$(grep -l '^//go:build gpu' $(git ls-files '*_test.go' 2>/dev/null || find . -name '*_test.go') \
  | xargs -n1 dirname | sort -u | sed 's#^#./#')
[ -n "$pkgs" ] || { echo "no gpu-tagged tests found" >&2; exit 1; }
for p in $pkgs; do
  name=$(echo "${p#./}" | sed 's#/#_#g')
  [ -n "$name" ] || name=root
  go test -c -tags gpu -o ".gpu/$name.test" "$p"
  echo "$name ${p#./}" >> .gpu/packages.txt
done
# Non-test helper binaries the GPU run needs (the command, when it exists).
if [ -d cmd/vyrecuda ]; then go build -o .gpu/vyrecuda ./cmd/vyrecuda; fi
cat > .gpu/run.sh <<'RUN'
#!/usr/bin/env bash
# Runs every gpu-tagged test binary in this folder; exits non-zero if any failed.
# Extra arguments are passed to every binary (e.g. -test.run Conformance).
# Each binary runs in its package's source folder when the checkout sits next
# to .gpu/ (tests read testdata/ relative to it), else in .gpu/ itself.
here=$(cd "$(dirname "$0")" && pwd)
status=0
while read -r name dir; do
  t="$here/$name.test"
  echo "=== $name"
  wd="$here/../$dir"; [ -d "$wd" ] || wd="$here"
  if (cd "$wd" && "$t" -test.v -test.count=1 "$@") > "$t.log" 2>&1; then
    echo "ok   $name ($(grep -c '^--- PASS' "$t.log") passed, $(grep -c '^--- SKIP' "$t.log") skipped)"
  else
    status=1
    echo "FAIL $name"; grep -E '^(--- FAIL|panic|\s+.*\.go:[0-9]+:)' "$t.log" | head -40
  fi
done < "$here/packages.txt"
exit $status
RUN
chmod +x .gpu/run.sh
echo "built $(ls .gpu/*.test | wc -l) test binaries into .gpu/"
