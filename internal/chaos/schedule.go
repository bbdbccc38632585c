package chaos

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
)

// Kind names a fault (or a scale event) of the schedule.
type Kind string

// The kinds of events a schedule draws from.
const (
	KillWorker  Kind = "kill"         // SIGKILL a worker's sidecar and trainer, as a lost pod
	KillLeader  Kind = "kill-leader"  // the same, to the worker whose member leads
	KillMany    Kind = "kill-many"    // SIGKILL two or more workers at once
	StopWorker  Kind = "stop"         // SIGSTOP a worker, SIGCONT after a while: a silent peer
	StopLeader  Kind = "stop-leader"  // the same, to the leader
	KillTrainer Kind = "kill-trainer" // SIGKILL the trainer alone
	KillSidecar Kind = "kill-sidecar" // SIGKILL the sidecar alone
	Drain       Kind = "drain"        // SIGTERM the sidecar, as on preemption
	ScaleUp     Kind = "scale-up"     // add workers
	EtcdRestart Kind = "etcd-restart" // SIGKILL etcd, restart it on the same data and port
	EtcdFreeze  Kind = "etcd-freeze"  // SIGSTOP etcd, SIGCONT after a while
	Partition   Kind = "partition"    // drop gossip (UDP) between two halves of the workers
)

// AllKinds are every kind, in a fixed order (the seeded draw depends on
// it).
var AllKinds = []Kind{KillWorker, KillLeader, KillMany, StopWorker, StopLeader, KillTrainer, KillSidecar,
	Drain, ScaleUp, EtcdRestart, EtcdFreeze, Partition}

// ParseKinds reads a comma-separated list of kinds; "all" is AllKinds.
func ParseKinds(s string) ([]Kind, error) {
	if s == "" || s == "all" {
		return slices.Clone(AllKinds), nil
	}
	var kinds []Kind
	for _, name := range strings.Split(s, ",") {
		k := Kind(strings.TrimSpace(name))
		if !slices.Contains(AllKinds, k) {
			return nil, fmt.Errorf("fault kind %q: want one of %s", k, kindList())
		}
		kinds = append(kinds, k)
	}
	return kinds, nil
}

func kindList() string {
	names := make([]string, len(AllKinds))
	for i, k := range AllKinds {
		names[i] = string(k)
	}
	return strings.Join(names, ", ")
}

// Event is one drawn event: its kind and the random numbers that pick its
// victims and durations when it is played (the live set is known only
// then).
type Event struct {
	Kind Kind
	// Pick chooses the victims among the live workers, Count how many for
	// KillMany and ScaleUp, Hold how long a freeze or an outage lasts (in
	// seconds, before scaling).
	Pick  uint64
	Count int
	Hold  float64
}

// Schedule draws n events from kinds with the seed: the same seed and
// kinds give the same schedule.
func Schedule(seed uint64, n int, kinds []Kind) []Event {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	events := make([]Event, n)
	for i := range events {
		events[i] = Event{Kind: kinds[r.IntN(len(kinds))], Pick: r.Uint64(), Count: 2 + r.IntN(2), Hold: 1 + 3*r.Float64()}
	}
	return events
}
