package footprint

import (
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
)

// settings are the runtime calls Apply makes; a zero field means none.
type settings struct {
	gcPercent   *int
	memoryLimit int64
	maxProcs    int
}

// plan returns what Apply should set for c, given the environment (lookup
// is os.LookupEnv) and the runtime's current GOMAXPROCS.
func plan(c Config, lookup func(string) (string, bool), procs int) settings {
	var s settings
	if _, set := lookup("GOGC"); !set {
		s.gcPercent = &c.GCPercent
	}
	if _, set := lookup("GOMEMLIMIT"); !set && c.MemoryLimit > 0 {
		s.memoryLimit = c.MemoryLimit
	}
	if _, set := lookup("GOMAXPROCS"); !set && c.MaxProcs > 0 && procs > c.MaxProcs {
		s.maxProcs = c.MaxProcs
	}
	return s
}

// Apply sets the Go runtime up as c says, leaving alone what the
// environment already set. It changes the whole process: call it once,
// from the sidecar's main, before the sidecar starts.
func Apply(c Config, log *slog.Logger) error {
	if err := c.Validate(); err != nil {
		return err
	}
	s := plan(c, os.LookupEnv, runtime.GOMAXPROCS(0))
	gogc := os.Getenv("GOGC")
	if s.gcPercent != nil {
		debug.SetGCPercent(*s.gcPercent)
		gogc = strconv.Itoa(*s.gcPercent)
	}
	if s.memoryLimit > 0 {
		debug.SetMemoryLimit(s.memoryLimit)
	}
	if s.maxProcs > 0 {
		runtime.GOMAXPROCS(s.maxProcs)
	}
	// SetMemoryLimit and GOMAXPROCS read the setting back when asked for a
	// negative or zero value; SetGCPercent has no such form.
	log.Debug("runtime set up", "gogc", gogc, "memory_limit", debug.SetMemoryLimit(-1),
		"gomaxprocs", runtime.GOMAXPROCS(0))
	return nil
}
