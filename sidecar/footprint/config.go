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
	// of goroutines that wait on the network, and each packet or timer that
	// wakes one costs a few thread wake-ups more for every extra P (a
	// spinning M looking for work, the hand-off between the goroutine that
	// reads a packet and the one that handles it). Setting it also stops
	// the runtime's once-a-second check of the container's CPU limit.
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
// 2-core machine shared with other work), after the node watch stopped
// linking client-go's clientset: each sidecar had 37 MiB resident, 28 MiB
// of it pages of the executable and 9 MiB its own memory (about 3 MiB live
// heap), and used 0.8% of a core idle.
//
//   - GCPercent 100: the runtime's default. An idle sidecar allocates about
//     0.6 MB a second, most of it memberlist's 64 KiB receive buffer per UDP
//     packet, so its heap sits at the 4 MiB minimum goal and it collects
//     every few seconds. GOGC 50 saved 1.4 MiB of resident memory but cost
//     0.07-0.16% of a core more; worth it once the packets stop allocating.
//   - MemoryLimit 64 MiB: well above the sidecar's whole resident set, so it
//     never makes the collector work in steady state, and below the 128 MiB
//     a sidecar container is commonly limited to, so a burst is collected
//     before the container is killed for it.
//   - MaxProcs 1: the idle CPU went from 0.78% to 0.66% of a core (two
//     runs each, two cores) and the resident set down by about 0.5 MiB
//     against GOMAXPROCS 2; failure detection was unchanged (median
//     0.66-0.71 s). One P still serves a burst of API requests in a few
//     milliseconds, well inside the 100 ms probe timeout, and the runtime
//     preempts any goroutine that runs for 10 ms.
//   - ReleaseStartupPages true: the executable's pages in the resident set
//     fell from 28 to about 18 MiB (37 to 26 MiB in all) half a minute after
//     the release, and the whole resident set was 28 MiB after the bench's
//     idle minute: the running sidecar maps back what it uses, chiefly the
//     runtime's tables for the frames the collector finds on its stacks.
//
// With all of it the bench measured 28.1 MiB and 0.55-0.70% of a core
// (medians of two sets of 3 runs), against 55.7 MiB and 1.07% with
// client-go's clientset linked.
func DefaultConfig() Config {
	return Config{
		GCPercent:           100,
		MemoryLimit:         64 * MiB,
		MaxProcs:            1,
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
