#!/usr/bin/env bash
# The device check: run from the repository root with bin/ringside.gz (and
# bin/ringtrainer.gz) present, as `make device-check` leaves them. Builds
# nothing: the binaries are static (CGO_ENABLED=0) and only unpacked here.
# Prints one JSON summary line on stdout (the parts' logs go to stderr and
# to $OUT or a temporary directory). CPU_ONLY=1 runs the CPU parts only and
# marks the GPU parts skipped. Exit status: 0 when every part that ran passed.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
work=$(mktemp -d -t ringside-device-check.XXXXXX)
bindir="$work/bin"
mkdir -p "$bindir"
for b in ringside ringtrainer; do
	if [ -f "bin/$b.gz" ]; then
		gunzip -c "bin/$b.gz" >"$bindir/$b"
	elif [ -x "bin/$b" ]; then
		cp "bin/$b" "$bindir/$b"
	fi
	[ -f "$bindir/$b" ] && chmod +x "$bindir/$b"
done
logs=${OUT:-$work}/device-check-logs
mkdir -p "$logs"
exec "$PY" hack/device-check/driver.py --bin "$bindir" --logs "$logs" ${CPU_ONLY:+--cpu-only} \
	--budget "${DEVICE_CHECK_BUDGET_S:-290}"
