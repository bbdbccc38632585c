# ringside: `make demo` shows it working, `make test` runs every test.
GO      ?= go
RACE    ?= -race
TIMEOUT ?= 40m
BIN     := bin/ringside
# Debian's python3-torch lives in the system Python, not in a pyenv one.
PYTHON  ?= /usr/bin/python3

.PHONY: device-check device-bin all build demo test vet fmt bench chaos clean torch iptables podtools python-test fuzz fuzz-short generate helm promtool image demo-k8s

all: build

## build: static binaries (no libc: what the container image ships)
build:
	CGO_ENABLED=0 $(GO) build -o $(BIN) ./cmd/ringside
	CGO_ENABLED=0 $(GO) build -o bin/ringtrainer ./examples/ringtrainer

## demo: embedded etcd, several workers, a crash, a scale-up and a drain
demo: build
	$(BIN) demo

## test: every Go package with the race detector, the Python tests beside
## them (each fuzz target's seed corpus runs as a test; `make fuzz-short`
## fuzzes). go test vets each package it tests with every check
## (-vet=all), on the race build it compiles anyway: only the packages
## without tests are vetted apart, with the race detector's build flags,
## so that the packages compiled for their analysis are the ones the
## tests link: a fresh machine compiles everything once.
##
## The Kubernetes tests' control plane, when the cache lacks it, is built
## at the lowest CPU priority from the start (internal/kubetest/prebuild),
## on the CPU the tests leave idle, not when the first package needing it
## runs. The vetting of the packages without tests, which compiles most
## of what the tests link, runs beside python3-torch's install.
##
## Nothing in the tests needs debugger information: without DWARF the
## compiler and the linker do about a tenth less work. The flags go in
## GOFLAGS so that the go commands the tests run (the binaries they start,
## helm) compile with the same flags, and share what is compiled.
test: export GOFLAGS += -gcflags=all=-dwarf=false -ldflags=-w
test: fmt iptables podtools
	@nice -n 19 sh -c '$(GO) build -o bin/prebuild ./internal/kubetest/prebuild && exec bin/prebuild' & pb=$$!; \
	$(GO) vet $(RACE) $$($(GO) list -f '{{if not (or .TestGoFiles .XTestGoFiles)}}{{.ImportPath}}{{end}}' ./...) & vet=$$!; \
	$(MAKE) --no-print-directory torch || { kill $$pb $$vet; wait; exit 1; }; \
	wait $$vet || { kill $$pb; wait $$pb; exit 1; }; \
	log=$$(mktemp); (cd python && $(PYTHON) -m unittest discover -s tests) >$$log 2>&1 & py=$$!; \
	$(GO) test $(RACE) -vet=all -count=1 -timeout $(TIMEOUT) ./...; rc=$$?; \
	if wait $$py; then echo "python tests: $$(tail -n 1 $$log)"; else echo "python tests FAILED:"; cat $$log; rc=1; fi; \
	kill $$pb 2>/dev/null; wait $$pb; rm -f $$log; exit $$rc

## The fuzz targets, package:target: one for every decoder of outside input
## (values in etcd, API bodies and requests, gossip messages and key files,
## sysfs, cluster files, flags). Seed corpora live in each package's
## testdata/fuzz/; a crash found is written there too, and replays in
## `go test` from then on.
FUZZ_TARGETS := \
	coordinator/record:FuzzDecodeMember coordinator/record:FuzzDecodeGeneration \
	coordinator/record:FuzzDecodeStatus coordinator/record:FuzzDecodeVote \
	coordinator/jobstatus:FuzzSnapshot trainer/api:FuzzBodies sidecar:FuzzTrainerAPI \
	sidecar/gossip:FuzzParseKeys sidecar/gossip:FuzzGossipMessage \
	netopt:FuzzSysfsValues netopt:FuzzReadCluster cmd/ringside:FuzzSidecarFlags \
	webhook:FuzzAdmissionReview
FUZZTIME_SHORT ?= 2s
FUZZTIME       ?= 10m

## fuzz-short: every fuzz target for FUZZTIME_SHORT (CI runs it after `make test`)
fuzz-short:
	@GO=$(GO) internal/fuzz/run.sh $(FUZZTIME_SHORT) $(FUZZ_TARGETS)

## fuzz: every fuzz target for FUZZTIME (10m each); prints each one's exec count
fuzz:
	@GO=$(GO) internal/fuzz/run.sh $(FUZZTIME) $(FUZZ_TARGETS)

## torch: installs Debian's python3-torch when missing (as root); with CI=true
## a torch that is still missing fails, so its tests never skip in CI
torch:
	@$(PYTHON) -c 'import torch' 2>/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing python3-torch (a few minutes)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-torch; \
	  fi; \
	  $(PYTHON) -c 'import torch' 2>/dev/null || { \
	    if [ "$(CI)" = true ]; then echo "CI=true and $(PYTHON) cannot import torch: install python3-torch" >&2; exit 1; fi; \
	    echo "$(PYTHON) cannot import torch: the PyTorch tests will be skipped (apt-get install python3-torch)"; }; }

## iptables: installs iptables when missing (as root): the chaos suite cuts
## gossip between workers with it; with CI=true a missing one fails
iptables:
	@command -v iptables >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing iptables"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends iptables; \
	  fi; \
	  command -v iptables >/dev/null || { \
	    if [ "$(CI)" = true ]; then echo "CI=true and iptables is missing: apt-get install iptables" >&2; exit 1; fi; \
	    echo "iptables is missing: the chaos tests leave gossip partitions out (apt-get install iptables)"; }; }

## podtools: installs iproute2 and util-linux when missing (as root): the
## test cluster's node agent puts each pod in a network namespace (ip) and
## each container in its own mounts and identity (nsenter, unshare,
## setpriv); with CI=true a missing one fails
podtools:
	@for t in ip:iproute2 nsenter:util-linux unshare:util-linux setpriv:util-linux mount:mount; do \
	  cmd=$${t%%:*}; pkg=$${t#*:}; \
	  command -v $$cmd >/dev/null || { \
	    if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	      echo "installing $$pkg"; \
	      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$pkg; \
	    fi; \
	    command -v $$cmd >/dev/null || { \
	      if [ "$(CI)" = true ]; then echo "CI=true and $$cmd is missing: apt-get install $$pkg" >&2; exit 1; fi; \
	      echo "$$cmd is missing: the Kubernetes node agent's tests will be skipped (apt-get install $$pkg)"; }; }; \
	done

## python-test: the Python package's tests (PyTorch ones with real processes)
python-test: torch
	cd python && $(PYTHON) -m unittest discover -s tests

## vet: gofmt and go vet of every package
vet: fmt
	$(GO) vet ./...

fmt:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }

## bench: the benchmarks behind the targets; each prints JSON lines
bench: build
	$(BIN) bench rendezvous --members 100 --json
	$(BIN) bench rendezvous --members 1000 --json
	$(BIN) bench rendezvous --members 10000 --json
	$(BIN) bench detect --members 8 --kills 5 --json
	$(BIN) bench recovery --trainer go --workers 8 --kills 8 --json
	$(BIN) bench recovery --trainer go --workers 8 --kills 4 --fault stop --json
	$(BIN) bench recovery --trainer pytorch --workers 8 --kills 8 --json
	$(BIN) bench recovery --trainer pytorch --workers 8 --kills 4 --fault stop --json
	$(BIN) bench recovery --trainer pytorch --workers 8 --kills 4 --mode restart --pause 15s --json
	$(BIN) bench goodput --trainer pytorch --workers 8 --duration 10m --kill-every 60s --json
	$(BIN) bench autoscale --json
	$(GO) test -run '^$$' -bench . -benchtime 20x ./netopt/

## chaos: a seeded schedule of faults for each of a few seeds; each prints a JSON line
## (violations on stderr); a bounded run of it is part of `make test`
CHAOS_SEEDS ?= 1 2 3
chaos: build iptables
	@for s in $(CHAOS_SEEDS); do $(BIN) bench chaos --workers 8 --events 100 --seed $$s --json || exit 1; done

clean:
	rm -rf bin

## generate: regenerates the ElasticScaler's deep-copy methods and CRD
generate:
	$(GO) run -C internal/tools sigs.k8s.io/controller-tools/cmd/controller-gen object paths=$(CURDIR)/autoscale/v1alpha1/...
	$(GO) run -C internal/tools sigs.k8s.io/controller-tools/cmd/controller-gen crd:allowDangerousTypes=true paths=$(CURDIR)/autoscale/v1alpha1/... output:crd:dir=$(CURDIR)/autoscale/crd
	cp autoscale/crd/*.yaml charts/ringside/crds/

## helm: the helm the chart is tested with (helm.sh/helm/v3 v3.22.0, pinned in
## internal/tools/helm), into bin/helm; the chart tests build their own copy
## once into the user's cache directory
helm:
	CGO_ENABLED=0 $(GO) build -C internal/tools/helm -trimpath -o $(CURDIR)/bin/helm helm.sh/helm/v3/cmd/helm

## promtool: the promtool the metrics are checked with (github.com/prometheus/prometheus
## v0.316.0, pinned in internal/tools/promtool), into bin/promtool; the metrics
## tests build their own copy once into the user's cache directory. Check a
## running component with: curl -s HOST:PORT/metrics | bin/promtool check metrics
promtool:
	CGO_ENABLED=0 $(GO) build -C internal/tools/promtool -trimpath -o $(CURDIR)/bin/promtool github.com/prometheus/prometheus/cmd/promtool

## image: the container image ringside:$(VERSION) (Dockerfile: a static
## binary on scratch, non-root)
VERSION ?= 0.1.0
image:
	docker build -t ringside:$(VERSION) .

## demo-k8s: ringside on a real control plane: the chart installed, the
## PyTorch example injected and training through a pod deletion, a killed
## worker and a scale-up (root; the first run builds the control plane)
demo-k8s:
	$(GO) run ./internal/e2e/demo

## device-bin: static, stripped binaries, gzipped into bin/ for a machine without Go
device-bin:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o bin/ringside ./cmd/ringside
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o bin/ringtrainer ./examples/ringtrainer
	gzip -kf bin/ringside bin/ringtrainer

## device-check: the GPU machine's check (hack/device-check/run.sh) on device-bin's binaries;
## CPU_ONLY=1 runs its CPU parts only. Prints one JSON line.
device-check: device-bin
	PYTHON=$(PYTHON) CPU_ONLY=$(CPU_ONLY) bash hack/device-check/run.sh
