# ringside: `make demo` shows it working, `make test` runs every test.
GO      ?= go
RACE    ?= -race
TIMEOUT ?= 25m
BIN     := bin/ringside
# Debian's python3-torch lives in the system Python, not in a pyenv one.
PYTHON  ?= /usr/bin/python3

.PHONY: all build demo test vet bench chaos clean torch iptables python-test

all: build

## build: static binaries (no libc: what the container image ships)
build:
	CGO_ENABLED=0 $(GO) build -o $(BIN) ./cmd/ringside
	CGO_ENABLED=0 $(GO) build -o bin/ringtrainer ./examples/ringtrainer

## demo: embedded etcd, several workers, a crash, a scale-up and a drain
demo: build
	$(BIN) demo

## test: vet and the Python tests, then every package with the race detector
test: vet python-test iptables
	$(GO) test $(RACE) -count=1 -timeout $(TIMEOUT) ./...

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

## python-test: the Python package's tests (PyTorch ones with real processes)
python-test: torch
	cd python && $(PYTHON) -m unittest discover -s tests

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...

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
	$(GO) test -run '^$$' -bench . -benchtime 20x ./netopt/

## chaos: a seeded schedule of faults for each of a few seeds; each prints a JSON line
## (violations on stderr); a bounded run of it is part of `make test`
CHAOS_SEEDS ?= 1 2 3
chaos: build iptables
	@for s in $(CHAOS_SEEDS); do $(BIN) bench chaos --workers 8 --events 100 --seed $$s --json || exit 1; done

clean:
	rm -rf bin
