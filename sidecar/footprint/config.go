package footprint

import (
	"errors"
	"fmt"
)

// ErrInvalidConfig is wrapped by the error Config.Validate returns.
var ErrInvalidConfig = errors.New("footprint: invalid config")

// MiB is a mebibyte, the unit the memory settings are given in.
const MiB = 1 << 20

// Config is how the sidecar process sets up the Go runtime. A variable the
// runtime reads itself (GOGC, GOMEMLIMIT, GOMAXPROCS) wins over the
// matching field: an operator who sets one in the pod spec means it.
type Config struct {
	// GCPercent is GOGC: the heap may grow by this percentage of the live
	// heap before the next collection; -1 turns the collector off (never
	// do that in a sidecar). The runtime also keeps the heap goal at least
	// GCPercent/100 * 4 MiB, which is what an idle sidecar, with about
	// 3 MiB live, runs at.
	GCPercent int

	// MemoryLimit is the soft memory limit in bytes (GOMEMLIMIT): as the
	// process's Go memory nears it, the collector runs more often, so that
	// a burst (a generation of thousands of members, a slow trainer piling
	// up heartbeats) is collected before it doubles the heap. 0 leaves the
	// runtime's default (no limit).
	MemoryLimit int64

	// MaxProcs caps GOMAXPROCS; 0 leaves the runtime's choice (the node's
	// cores, or the container's CPU limit). The sidecar's work is a handful
	// of goroutines that wait on the network; on a GPU node with a hundred
	// cores and no CPU limit, the runtime would otherwise keep a P, its
	// caches and an idle GC worker per core.
	MaxProcs int

	// ReleaseStartupPages unmaps, once the sidecar runs, the pages of the
	// executable that starting up touched (see ReleaseStartupPages): the
	// code and tables of packages the sidecar links but never calls. Only
	// what the running sidecar uses comes back.
	ReleaseStartupPages bool
}

// DefaultConfig returns the settings `ringside sidecar` runs with.
//
// Measured with `ringside bench detect --members 8` (8 sidecars on one
// 2-core machine) before the package existed: each sidecar had 37 MiB
// resident, 28 MiB of it pages of the executable and 9 MiB its own memory,
// of which about 3 MiB was live heap.
//
//   - GCPercent 100: the runtime's default. An idle sidecar allocates about
//     1 MiB a second (gossip packets, etcd keep-alives), so its heap sits at
//     the 4 MiB minimum goal; a lower value would collect more often for a
//     few hundred KiB.
//   - MemoryLimit 64 MiB: well above the sidecar's whole resident set, so it
//     never makes the collector work in steady state, and below the 128 MiB
//     a sidecar container is commonly limited to, so a burst is collected
//     before the container is killed for it.
//   - MaxProcs 2: one P runs the sidecar while the other runs a collection
//     or a burst of API requests; more only adds idle Ps.
//   - ReleaseStartupPages true: see ReleaseStartupPages.
func DefaultConfig() Config {
	return Config{
		GCPercent:           100,
		MemoryLimit:         64 * MiB,
		MaxProcs:            2,
		ReleaseStartupPages: true,
	}
}

// Validate reports what is wrong with c, if anything, in an error wrapping
// ErrInvalidConfig.
func (c Config) Validate() error {
	if c.GCPercent < -1 {
		return fmt.Errorf("%w: GC percent %d: want -1 (off) or more", ErrInvalidConfig, c.GCPercent)
	}
	if c.MemoryLimit < 0 {
		return fmt.Errorf("%w: memory limit %d is negative; use 0 for none", ErrInvalidConfig, c.MemoryLimit)
	}
	if c.MaxProcs < 0 {
		return fmt.Errorf("%w: max procs %d is negative; use 0 for the runtime's choice", ErrInvalidConfig, c.MaxProcs)
	}
	return nil
}
