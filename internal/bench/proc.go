package bench

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// rssMiB reads the resident set size of pid.
func rssMiB(pid int) float64 { return statusMiB(pid, "VmRSS:") }

// anonMiB reads the anonymous part of pid's resident set: its own memory,
// without the pages of the executable it shares with every process running
// the same file.
func anonMiB(pid int) float64 { return statusMiB(pid, "RssAnon:") }

// statusMiB reads a kB field of /proc/<pid>/status, in MiB; 0 if missing.
func statusMiB(pid int, field string) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == field {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

// cpuSeconds reads the user+system CPU time of pid.
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ is 100 on Linux
}
