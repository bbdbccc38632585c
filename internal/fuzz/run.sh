#!/usr/bin/env bash
# Runs fuzz targets, each for a fuzz time: run.sh TIME pkg:Target...
#
# Each package's test binary is built once, with the fuzzing
# instrumentation (go test -c -fuzz), and runs every target of its package
# from the package's directory, so its testdata/fuzz seed corpus is read and
# a crash is written there; the corpus it grows goes where `go test -fuzz`
# keeps it (GOCACHE/fuzz). One `go test -fuzz` per target would link the
# package's test binary again for each. Prints each target's last status
# line (its exec count); exits non-zero on the first failure.
set -euo pipefail
time=$1; shift
go=${GO:-go}
module=$($go list -m)
cache=$($go env GOCACHE)/fuzz
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
declare -A built
for t in "$@"; do
  pkg=${t%%:*} target=${t##*:}
  exe=$bin/${pkg//\//_}.test
  if [[ -z ${built[$pkg]:-} ]]; then
    $go test -c -fuzz=. -o "$exe" "./$pkg"
    built[$pkg]=1
  fi
  log=$bin/$target.log
  if ! (cd "$pkg" && "$exe" -test.run='^$' -test.fuzz="^$target\$" -test.fuzztime="$time" \
      -test.fuzzcachedir="$cache/$module/$pkg") >"$log" 2>&1; then
    # Go 1.26's fuzz coordinator can report its own -fuzztime deadline as
    # a failure ("context deadline exceeded", no input written:
    # golang/go#75804, fixed in 1.27). A real finding always writes its
    # input and says so; anything else still fails.
    if grep -q 'context deadline exceeded' "$log" && ! grep -qE 'Failing input written|panic:|\.go:[0-9]+:' "$log"; then
      echo "fuzz $t ($time): stopped at its deadline (golang/go#75804), nothing found: $(grep -E '^fuzz: elapsed' "$log" | tail -1)"
      continue
    fi
    cat "$log"
    echo "fuzz $t: FAILED (the input is in $pkg/testdata/fuzz/$target/)" >&2
    exit 1
  fi
  echo "fuzz $t ($time): $(grep -E '^fuzz: elapsed' "$log" | tail -1)"
done
