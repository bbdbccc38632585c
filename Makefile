# ringside: `make demo` shows it working, `make test` runs every test.
GO      ?= go
RACE    ?= -race
TIMEOUT ?= 25m
BIN     := bin/ringside

.PHONY: all build demo test vet bench chaos clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/ringside
	$(GO) build -o bin/ringtrainer ./examples/ringtrainer

## demo: embedded etcd, several workers, a crash, a scale-up and a drain
demo: build
	$(BIN) demo

## test: vet, then every package with the race detector
test: vet
	$(GO) test $(RACE) -count=1 -timeout $(TIMEOUT) ./...

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
	$(GO) test -run '^$$' -bench . -benchtime 20x ./netopt/

clean:
	rm -rf bin
