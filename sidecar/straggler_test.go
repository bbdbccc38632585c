package sidecar_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ringside/ringside/coordinator/record"
	"github.com/ringside/ringside/internal/etcdtest"
	"github.com/ringside/ringside/sidecar"
	"github.com/ringside/ringside/sidecar/sidecartest"
	"github.com/ringside/ringside/trainer/api"
)

// Four sidecars whose trainers report their compute times; w3's computes
// 1.5 times as long. With the replace policy the leader names it, its
// sidecar shows it in ringside_straggler and drains it as a preemption
// would, and the ring goes on without it.
func TestAStragglerIsNamedAndWithReplaceDrainedOutOfTheRing(t *testing.T) {
	srv := etcdtest.Start(t)
	var agents []*sidecartest.Agent
	var clients []*apiClient
	var streams []*eventStream
	for i := range 4 {
		id := fmt.Sprintf("w%d", i)
		a := sidecartest.Start(t, srv.Endpoints(), "straggler", id, func(c *sidecar.Config) {
			c.Job.Straggler.Action = record.ActionReplace
			c.Job.Straggler.Window = 10
			c.Job.Policy.Min = 3
		})
		agents = append(agents, a)
		clients = append(clients, newAPIClient(t, a.Socket))
		streams = append(streams, clients[i].events())
	}
	streams[0].await(t, "the ring of 4", generationWhere(func(r *api.Rendezvous) bool { return r.WorldSize == 4 }))
	if got := sampleValue(t, agents[3].Gatherer(), "ringside_straggler", "member", "w3"); got != 0 {
		t.Fatalf("ringside_straggler{member=w3} = %g before any step, want 0", got)
	}

	var drain *api.Event
	slowSteps(t, clients, streams[3], func(e api.Event) bool {
		if e.Type == api.EventDrain {
			drain = &e
		}
		return drain != nil
	})
	if !strings.HasPrefix(drain.Reason, "straggler: computes 1.50x") {
		t.Errorf("drain reason %q, want the straggler's", drain.Reason)
	}
	// (Its ringside_straggler reads 1 only until the leader clears the
	// finding of a member gone from the ring: the next test reads it.)
	if got := sampleValue(t, agents[0].Gatherer(), "ringside_straggler", "member", "w0"); got != 0 {
		t.Errorf("ringside_straggler{member=w0} = %g, want 0", got)
	}
	e := streams[0].await(t, "the ring without w3", generationWhere(func(r *api.Rendezvous) bool { return !has(r, "w3") }))
	if e.Generation.WorldSize != 3 || e.Generation.Reason != "drain w3" {
		t.Errorf("generation %+v, want world size 3 after the drain of w3", e.Generation)
	}
	if err := agents[3].Stop(); err != nil {
		t.Fatalf("the straggler's sidecar returned %v, want nil after its drain", err)
	}
}

// With min world size 4 of 4, replacing the straggler would pause the
// job: it is named (report), ringside_straggler says so, and it stays.
func TestReplaceKeepsAStragglerWhoseLeavingWouldPauseTheJob(t *testing.T) {
	srv := etcdtest.Start(t)
	var clients []*apiClient
	var streams []*eventStream
	var agents []*sidecartest.Agent
	for i := range 4 {
		a := sidecartest.Start(t, srv.Endpoints(), "straggler-min", fmt.Sprintf("w%d", i), func(c *sidecar.Config) {
			c.Job.Straggler.Action = record.ActionReplace
			c.Job.Straggler.Window = 10
			c.Job.Policy.Min = 4
		})
		agents = append(agents, a)
		clients = append(clients, newAPIClient(t, a.Socket))
		streams = append(streams, clients[i].events())
	}
	streams[0].await(t, "the ring of 4", generationWhere(func(r *api.Rendezvous) bool { return r.WorldSize == 4 }))
	slowSteps(t, clients, streams[3], func(e api.Event) bool {
		if e.Type == api.EventDrain {
			t.Fatalf("w3 drained (%s) although the job would pause without it", e.Reason)
		}
		return sampleValue(t, agents[3].Gatherer(), "ringside_straggler", "member", "w3") == 1
	})
}

// slowSteps reports a step every 10 ms on each of clients, the last one
// computing 1.5 times as long as the others, until done (asked with each
// event of stream, and between steps with a zero event) says so, failing
// the test after 30 s.
func slowSteps(t *testing.T, clients []*apiClient, stream *eventStream, done func(api.Event) bool) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond) // the trainers' steps
	defer tick.Stop()
	deadline := time.After(30 * time.Second)
	for step := 1; ; step++ {
		for i, c := range clients {
			compute := 0.05
			if i == len(clients)-1 {
				compute = 0.075
			}
			body := fmt.Sprintf(`{"step":%d,"samples":%d,"step_time_s":0.1,"compute_time_s":%g,"wait_time_s":%g}`, step, step, compute, 0.1-compute)
			if resp, b := c.do("POST", "/v1/heartbeat", body); resp.StatusCode != http.StatusNoContent {
				t.Fatalf("heartbeat of member %d: %s %s", i, resp.Status, b)
			}
		}
		select {
		case e := <-stream.events:
			if done(e) {
				return
			}
		case <-tick.C:
			if done(api.Event{}) {
				return
			}
		case <-deadline:
			t.Fatalf("not done within 30 s of slow steps (step %d)", step)
		}
	}
}
