// Package launch is ringside's restart mode: it runs an unmodified trainer
// command with torchrun's environment contract taken from the sidecar's
// current generation, one process per slot, and restarts it on every new
// generation.
package launch

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/ringside/ringside/trainer/api"
)

// EnvOptions are the values torchrun's contract needs beyond the
// generation.
type EnvOptions struct {
	RestartCount, MaxRestarts int
	RunID                     string
	Socket                    string
}

// Env returns base with the variables of slot (local rank) in r set, the
// way torchrun sets them for its workers, plus the NCCL settings. Variables
// already in base are overridden, except OMP_NUM_THREADS and NCCL settings
// the user set.
func Env(base []string, r *api.Rendezvous, slot int, o EnvOptions) []string {
	set := rankVars(r, slot)
	maps.Copy(set, map[string]string{
		"LOCAL_WORLD_SIZE":             strconv.Itoa(r.LocalWorldSize),
		"TORCHELASTIC_RESTART_COUNT":   strconv.Itoa(o.RestartCount),
		"TORCHELASTIC_MAX_RESTARTS":    strconv.Itoa(o.MaxRestarts),
		"TORCHELASTIC_RUN_ID":          o.RunID,
		"TORCHELASTIC_USE_AGENT_STORE": "False",
		"RINGSIDE_SOCKET":              o.Socket,
	})
	keep := envKeys(base)
	// torchrun sets OMP_NUM_THREADS=1 for several workers per node unless
	// the user chose a value.
	if !keep["OMP_NUM_THREADS"] {
		set["OMP_NUM_THREADS"] = "1"
	}
	for k, v := range r.NCCL {
		if !keep[k] {
			set[k] = v
		}
	}
	return setEnv(base, set)
}

// rankVars are the variables of torchrun's contract that slot's place in
// generation r decides: its rank, the world, rank 0's address.
func rankVars(r *api.Rendezvous, slot int) map[string]string {
	rank := r.Rank + slot
	return map[string]string{
		"RANK":                strconv.Itoa(rank),
		"LOCAL_RANK":          strconv.Itoa(slot),
		"WORLD_SIZE":          strconv.Itoa(r.WorldSize),
		"GROUP_RANK":          strconv.Itoa(r.GroupRank),
		"NODE_RANK":           strconv.Itoa(r.GroupRank),
		"GROUP_WORLD_SIZE":    strconv.Itoa(r.NumGroups),
		"ROLE_NAME":           "default",
		"ROLE_RANK":           strconv.Itoa(rank),
		"ROLE_WORLD_SIZE":     strconv.Itoa(r.WorldSize),
		"MASTER_ADDR":         r.MasterAddr,
		"MASTER_PORT":         strconv.Itoa(r.MasterPort),
		"RINGSIDE_GENERATION": strconv.FormatInt(r.Generation, 10),
		"RINGSIDE_MEMBER":     r.Member,
	}
}

// envKeys returns the names of the variables in env.
func envKeys(env []string) map[string]bool {
	keys := map[string]bool{}
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		keys[k] = true
	}
	return keys
}

// setEnv returns base with the variables in set replaced or added, in a
// stable order.
func setEnv(base []string, set map[string]string) []string {
	out := make([]string, 0, len(base)+len(set))
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if _, ours := set[k]; !ours {
			out = append(out, kv)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(set)) {
		out = append(out, fmt.Sprintf("%s=%s", k, set[k]))
	}
	return out
}

// baseEnv is the environment the command inherits.
func baseEnv() []string { return os.Environ() }
