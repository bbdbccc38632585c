package autoscale

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ringside/ringside/coordinator/jobstatus"
	"github.com/ringside/ringside/coordinator/record"
)

func TestReadJobStateMeasuresOnlyACompleteCurrentGeneration(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 30, 500_000_000, time.UTC)
	gns := func(v float64) *float64 { return &v }
	age := func(s float64) *float64 { return &s }
	member := func(id string, rank int, state record.State, sps float64, beatAge *float64, beatGen int64, g *float64) jobstatus.Member {
		return jobstatus.Member{ID: id, Rank: rank, Slots: 1, State: state, SamplesPerSec: sps, StepTimeP50S: 0.5,
			LastHeartbeatAgeS: beatAge, HeartbeatGeneration: beatGen, GNS: g}
	}
	snap := func(gen int64, members ...jobstatus.Member) jobstatus.Snapshot {
		return jobstatus.Snapshot{Time: now, Generation: gen, Members: members}
	}
	maxAge := 30 * time.Second
	tests := []struct {
		name string
		s    jobstatus.Snapshot
		want jobState
	}{{
		name: "a job with no generation has no status",
		s:    snap(0, member("w0", -1, record.StateWaiting, 0, age(1), 0, nil)),
		want: jobState{},
	}, {
		name: "a generation whose members all reported measures the sum, at the oldest heartbeat",
		s:    snap(3, member("w0", 0, record.StateActive, 100, age(1), 3, gns(400)), member("w1", 1, record.StateActive, 50, age(2.5), 3, gns(600))),
		want: jobState{Workers: 2, HaveStatus: true, StatusAge: time.Second, Measurement: &Measurement{
			Time: time.Date(2026, 12, 1, 12, 0, 28, 0, time.UTC), WorldSize: 2, SamplesPerSec: 150, GNS: gns(500), BatchPerWorker: 37.5}},
	}, {
		name: "a member still reporting the previous generation is a resize in progress",
		s:    snap(4, member("w0", 0, record.StateActive, 100, age(1), 4, nil), member("w1", 1, record.StateActive, 100, age(1), 3, nil)),
		want: jobState{Workers: 2, HaveStatus: true, StatusAge: time.Second},
	}, {
		name: "a draining member is no capacity and no measurement",
		s: snap(2, member("w0", 0, record.StateActive, 100, age(1), 2, nil), member("w1", 1, record.StateDraining, 100, age(1), 2, nil),
			member("w2", -1, record.StateWaiting, 0, nil, 0, nil)),
		want: jobState{Workers: 1, Draining: 1, HaveStatus: true, StatusAge: time.Second},
	}, {
		name: "a stale heartbeat measures nothing",
		s:    snap(2, member("w0", 0, record.StateActive, 100, age(1), 2, nil), member("w1", 1, record.StateActive, 100, age(31), 2, nil)),
		want: jobState{Workers: 2, HaveStatus: true, StatusAge: time.Second},
	}, {
		name: "a gone member measures nothing",
		s:    snap(2, member("w0", 0, record.StateActive, 100, age(1), 2, nil), member("w1", 1, record.StateGone, 0, nil, 0, nil)),
		want: jobState{Workers: 1, HaveStatus: true, StatusAge: time.Second},
	}, {
		name: "a generation without heartbeats has no status",
		s:    snap(1, member("w0", 0, record.StateActive, 0, nil, 0, nil)),
		want: jobState{Workers: 1},
	}, {
		name: "zero throughput is a measurement",
		s:    snap(1, member("w0", 0, record.StateActive, 0, age(0), 1, nil)),
		want: jobState{Workers: 1, HaveStatus: true, Measurement: &Measurement{Time: now.Truncate(time.Second), WorldSize: 1}},
	}, {
		name: "a paused generation measures nothing",
		s:    jobstatus.Snapshot{Time: now, Generation: 1, Paused: true, Members: []jobstatus.Member{member("w0", 0, record.StateActive, 10, age(0), 1, nil)}},
		want: jobState{Workers: 1, HaveStatus: true},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, readJobState(tt.s, maxAge)); diff != "" {
				t.Errorf("readJobState (-want +got):\n%s", diff)
			}
		})
	}
}

func TestHistoryIsBoundedInAgeAndLength(t *testing.T) {
	h := newHistory(time.Minute, 3)
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for i := range 5 {
		h.addRecommendation("k", Recommendation{Time: t0.Add(time.Duration(i) * time.Second), Replicas: int32(i)})
	}
	h.addChange("k", Change{Time: t0, From: 1, To: 2})
	recs, changes := h.get("k", t0.Add(5*time.Second))
	if len(recs) != 3 || recs[0].Replicas != 2 || len(changes) != 1 {
		t.Fatalf("recommendations %v, changes %v; want the newest 3 and the change", recs, changes)
	}
	recs, changes = h.get("k", t0.Add(time.Minute+3*time.Second))
	if len(recs) != 2 || len(changes) != 0 {
		t.Fatalf("a minute later: recommendations %v, changes %v; want only those younger than a minute", recs, changes)
	}
	h.forget("k")
	if recs, changes := h.get("k", t0); recs != nil || changes != nil {
		t.Fatalf("after forget: %v, %v", recs, changes)
	}
}
