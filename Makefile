# vyrecuda build entry points. `make demo` and `make test` are the README's two commands.
GO        ?= go
FUZZTIME  ?= 2m
# Short fuzz budget used by `make test` (CI) for every fuzz target. A count,
# not a duration: with a duration, Go before 1.27 can fail a target with a
# bare "context deadline exceeded" when the deadline races a busy worker
# (golang/go#75804), with no failing input behind it.
FUZZSHORT ?= 2000x
# Seeds of the long core properties in `make fuzz` (VYRECUDA_PROP_SEED).
PROPSEEDS ?= 20250601 1 977
# Bound on minimizing each new interesting fuzz input: a count of
# executions. Go's default (60 s per input) let FuzzBackendSequence, whose
# executions each run a whole command sequence, spend nearly its whole
# budget minimizing instead of exploring.
FUZZMINIMIZE ?= 100x
CUDA_H    ?=
NVRTC_H   ?=
NCCL_H    ?=
PKGS      := ./...
# staticcheck, at the version `make lint` runs (fetched through the module
# proxy on first use; kept out of go.mod so the library's users stay on Go 1.24).
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: all test race nocgo fuzz-short fuzz lint generate check-headers demo bench check-plots gpu-test-bin ci clean

all: lint test

## test: race-enabled unit and property tests, the packages that touch cgo
## built without it (every driver call must then report ErrDriverNotFound),
## then a short run of every fuzz target.
test: race nocgo fuzz-short

race:
	$(GO) test -race -count=1 $(PKGS)

nocgo:
	CGO_ENABLED=0 $(GO) test -count=1 ./internal/dynlib ./cudaapi ./ncclapi ./nvrtcapi ./nvrtc ./core/... ./cmd/...


fuzz-short:
	@$(MAKE) --no-print-directory fuzz FUZZTIME=$(FUZZSHORT)

## fuzz: the core state-machine properties at long size once per seed of
## PROPSEEDS, then every fuzz target for FUZZTIME each (default 2m).
fuzz:
	@if [ "$(FUZZTIME)" != "$(FUZZSHORT)" ]; then \
	  for seed in $(PROPSEEDS); do \
	    echo "long core properties (VYRECUDA_PROP_LONG=1 VYRECUDA_PROP_SEED=$$seed)"; \
	    VYRECUDA_PROP_SEED=$$seed VYRECUDA_PROP_LONG=1 $(GO) test -count=1 -timeout 2h -run '^TestCore' ./proptest || exit 1; \
	  done; \
	fi
	@set -e; $(GO) test -list '^Fuzz' $(PKGS) > .fuzzlist.tmp 2>&1 || { cat .fuzzlist.tmp; rm -f .fuzzlist.tmp; exit 1; }; \
	awk '/^Fuzz/ {t = t " " $$1} /^ok/ { if (t != "") print $$2 t; t = "" }' .fuzzlist.tmp > .fuzzpairs.tmp; rm -f .fuzzlist.tmp; \
	while read -r pkg targets; do \
	  for t in $$targets; do \
	    echo "fuzz $$pkg $$t for $(FUZZTIME)"; \
	    $(GO) test -run '^$$' -fuzz "^$$t\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE) "$$pkg" || { rm -f .fuzzpairs.tmp; exit 1; }; \
	  done; \
	done < .fuzzpairs.tmp; rm -f .fuzzpairs.tmp

## lint: gofmt check, go vet (with and without cgo), staticcheck at the
## version STATICCHECK pins, and that core does not depend on Prometheus.
lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet $(PKGS)
	CGO_ENABLED=0 $(GO) vet $(PKGS)
	$(GO) run $(STATICCHECK) $(PKGS)
	@if $(GO) list -deps ./core/... | grep -q '^github.com/prometheus/'; then \
	  echo "core imports Prometheus: only package metrics may"; exit 1; fi

## generate: regenerate cudaapi from a cuda.h (CUDA_H=path, or $$CUDA_HOME/include/cuda.h);
## with NCCL_H=path, ncclapi from that nccl.h, and with NVRTC_H=path, nvrtcapi from that
## nvrtc.h (NCCL_H or NVRTC_H alone regenerates only those).
generate:
ifneq ($(NCCL_H),)
	cd ncclapi && NCCL_H=$(abspath $(NCCL_H)) $(GO) generate ./...
endif
ifneq ($(NVRTC_H),)
	cd nvrtcapi && NVRTC_H=$(abspath $(NVRTC_H)) $(GO) generate ./...
endif
ifneq ($(CUDA_H)$(if $(NCCL_H)$(NVRTC_H),,default),)
	cd cudaapi && $(if $(CUDA_H),CUDA_H=$(abspath $(CUDA_H)),) $(GO) generate ./...
endif

## check-headers: for each CUDA_HEADERS/*/cuda.h, regenerate cudaapi in a
## temporary copy of the tree and run build, vet (with and without the gpu
## tag) and the gen and cudaapi tests there. Not part of `make test`: CI has
## no NVIDIA headers (gen/README.md says how to fetch them).
CUDA_HEADERS ?=
check-headers:
	@test -n "$(CUDA_HEADERS)" || { echo "usage: make check-headers CUDA_HEADERS=DIR (each DIR/*/cuda.h is checked)"; exit 2; }
	./scripts/check-headers.sh $(CUDA_HEADERS)

## demo: run the demo (simulated device when no GPU is present).
demo:
	$(GO) run ./cmd/vyrecuda demo

## bench: Go benchmarks, then the command's W1-W6 table on the default device
## (the GPU when present, else the simulated device), writing bench-out/.
BENCHFLAGS ?= -count 256 -large 16MiB -sweep-max 16MiB
bench:
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)
	$(GO) run ./cmd/vyrecuda bench $(BENCHFLAGS) -out bench-out

## check-plots: draw the bench's bandwidth and W8 SVGs and a memory timeline (memplot of a
## bench run's memory snapshot) on the simulated device, then render both to PNG
## in headless Chromium (installed from Debian's packages when missing) under
## PLOTDIR, to look at.
PLOTDIR   ?= plots-out
CHROMIUM  ?= /usr/bin/chromium
check-plots:
	@mkdir -p $(PLOTDIR)
	$(GO) run ./cmd/vyrecuda bench -device sim -workloads W4C,W7U,W8 -repeats 2 -warmup 1 -churn-steps 2000 \
	  -mixed-count 256 -mixed-max 64KiB -sweep-min 4KiB -sweep-max 4MiB -w8-steps 20 -w8-warmup 2 \
	  -out $(PLOTDIR) -memory-snapshot $(PLOTDIR)/memory.json > $(PLOTDIR)/bench.txt
	$(GO) run ./cmd/vyrecuda memplot $(PLOTDIR)/memory.json -o $(PLOTDIR)/memory.svg
	@if [ ! -x $(CHROMIUM) ]; then apt-get update && apt-get install -y chromium; fi
	@set -e; for svg in bandwidth w8 memory; do \
	  size=$$(sed -n 's/.*<svg [^>]*width="\([0-9]*\)" height="\([0-9]*\)".*/\1,\2/p' $(PLOTDIR)/$$svg.svg | head -n 1); \
	  profile=$$(mktemp -d); \
	  $(CHROMIUM) --headless --no-sandbox --disable-gpu --disable-background-networking --disable-component-update \
	    --disable-sync --no-first-run --user-data-dir=$$profile --hide-scrollbars --window-size=$$size \
	    --screenshot=$(abspath $(PLOTDIR))/$$svg.png file://$(abspath $(PLOTDIR))/$$svg.svg 2>/dev/null; \
	  rm -rf $$profile; \
	  test -s $(PLOTDIR)/$$svg.png || { echo "no $(PLOTDIR)/$$svg.png"; exit 1; }; \
	  echo "wrote $(PLOTDIR)/$$svg.png ($$size)"; \
	done

## gpu-test-bin: build gpu-tagged test binaries into .gpu/ with .gpu/run.sh to run them on a GPU machine.
gpu-test-bin:
	./scripts/gpu-test-bin.sh

## ci: everything CI runs.
ci: lint test

clean:
	rm -rf .gpu bench-out $(PLOTDIR)
