package jobstatus

import (
	"reflect"
	"slices"
	"time"

	"github.com/ringside/ringside/coordinator/record"
)

// Snapshot is a job's state at one etcd revision.
type Snapshot struct {
	Job       string `json:"job"`
	Namespace string `json:"namespace"`
	// Time is when the snapshot was read, on the reader's clock.
	Time time.Time `json:"time"`
	// Revision is the etcd revision the snapshot was read at.
	Revision int64 `json:"revision"`
	// Generation is the committed generation's number, 0 before the first.
	Generation int64  `json:"generation"`
	Paused     bool   `json:"paused"`
	Reason     string `json:"reason,omitempty"`
	// Restarts counts the job's restarts after trainer crashes (restart
	// mode), as its budget counts them.
	Restarts int64 `json:"restarts,omitempty"`
	// Stopped says why trainer crashes stopped the job, "" while they
	// did not.
	Stopped string `json:"stopped,omitempty"`
	// Finished are the generation's members whose trainers finished in
	// it (restart mode): the job is finishing, and no generation follows.
	Finished []string `json:"finished,omitempty"`
	// Leader is the member that leads the job now (the first in the
	// election), "" if none does.
	Leader string `json:"leader,omitempty"`
	// CommittedBy is the leader that committed the generation.
	CommittedBy string `json:"committed_by,omitempty"`
	WorldSize   int    `json:"world_size"`
	// Master is host:port of rank 0's process-group store.
	Master string `json:"master,omitempty"`
	// Members holds the generation's members in ring order, then the
	// registered members in no generation (record.StateWaiting) in join
	// order.
	Members []Member `json:"members"`
	// Standby lists the members the policy leaves out of the generation.
	Standby []string `json:"standby,omitempty"`
	// Stragglers are the members the leader names stragglers, by id.
	Stragglers []Straggler `json:"stragglers,omitempty"`
	// DrainSeconds are the durations of the job's newest drains, oldest
	// first (record.Drains).
	DrainSeconds []float64 `json:"drain_seconds,omitempty"`
	Totals       Totals    `json:"totals"`
	Warnings     []string  `json:"warnings,omitempty"`
}

// Member is one row of a snapshot. The heartbeat fields are zero when the
// member's sidecar has stored no status.
type Member struct {
	ID   string `json:"id"`
	Addr string `json:"addr"`
	// Rank is the member's first rank, -1 for a waiting member.
	Rank  int `json:"rank"`
	Slots int `json:"slots"`
	// State is one of the status view's states (record.State): active,
	// draining, waiting, gone or unknown.
	State record.State `json:"state"`

	Step          int64   `json:"step"`
	SamplesPerSec float64 `json:"samples_per_s"`
	StepTimeP50S  float64 `json:"step_time_p50_s"`
	// LastHeartbeatAgeS is how long before Snapshot.Time the member's
	// status was stored, in seconds; nil when it has stored none.
	LastHeartbeatAgeS *float64 `json:"last_heartbeat_age_s,omitempty"`
	// HeartbeatGeneration is the generation the member's trainer ran in
	// when it sent the heartbeat (0 when unknown): a heartbeat of an
	// older generation measured the job at another size.
	HeartbeatGeneration int64 `json:"heartbeat_generation,omitempty"`
	// GNS is the gradient noise scale the trainer last reported, nil
	// when it reports none.
	GNS *float64 `json:"gns,omitempty"`
	// ComputeTimeS and WaitTimeS split the trainer's step time into its
	// compute and its wait for its peers (0 when it does not report them).
	ComputeTimeS float64 `json:"compute_time_s,omitempty"`
	WaitTimeS    float64 `json:"wait_time_s,omitempty"`
}

// Straggler is the leader's finding about one member.
type Straggler struct {
	Member string `json:"member"`
	record.Straggler
}

// Totals sums the generation's members.
type Totals struct {
	SamplesPerSec float64 `json:"samples_per_s"`
}

// Changed reports whether cur differs from prev in anything but progress:
// time, revision, steps, throughput and heartbeat ages. A caller that cannot
// redraw in place (a log, a pipe) prints only the snapshots that changed.
func Changed(prev, cur Snapshot) bool {
	return !reflect.DeepEqual(withoutProgress(prev), withoutProgress(cur))
}

func withoutProgress(s Snapshot) Snapshot {
	s.Time, s.Revision, s.Totals = time.Time{}, 0, Totals{}
	s.Stragglers = slices.Clone(s.Stragglers)
	for i := range s.Stragglers {
		// A finding is news; its figures as the leader updates them are not.
		f := &s.Stragglers[i]
		f.Step, f.ComputeTimeS, f.MedianComputeTimeS, f.Time = 0, 0, 0, time.Time{}
	}
	s.Members = slices.Clone(s.Members)
	for i := range s.Members {
		m := &s.Members[i]
		m.Step, m.SamplesPerSec, m.StepTimeP50S, m.LastHeartbeatAgeS = 0, 0, 0, nil
		m.HeartbeatGeneration, m.GNS, m.ComputeTimeS, m.WaitTimeS = 0, nil, 0, 0
	}
	return s
}
