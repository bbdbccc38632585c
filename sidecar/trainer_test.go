package sidecar_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ringside/ringside/coordinator"
	"github.com/ringside/ringside/coordinator/record"
	"github.com/ringside/ringside/internal/etcdtest"
	"github.com/ringside/ringside/sidecar"
	"github.com/ringside/ringside/sidecar/sidecartest"
	"github.com/ringside/ringside/trainer/api"
)

// trio starts three in-process sidecars, w0 to w2, of job with the
// default settle window (the one the trainer's return waits out); mutate
// adjusts each config.
func trio(t *testing.T, job string, mutate func(id string, c *sidecar.Config)) []*sidecartest.Agent {
	t.Helper()
	srv := etcdtest.Start(t)
	var agents []*sidecartest.Agent
	for _, id := range []string{"w0", "w1", "w2"} {
		agents = append(agents, sidecartest.Start(t, srv.Endpoints(), job, id, func(c *sidecar.Config) {
			c.Job.Settle = coordinator.DefaultConfig(c.Job.Namespace, job).Settle
			if mutate != nil {
				mutate(id, c)
			}
		}))
	}
	return agents
}

func generationWhere(ok func(*api.Rendezvous) bool) func(api.Event) bool {
	return func(e api.Event) bool {
		return e.Type == api.EventGeneration && e.Generation != nil && ok(e.Generation)
	}
}

// A trainer that dies while its sidecar lives (its container OOM killed)
// closes its event stream: its member leaves the ring at once, and enters
// it again when the restarted trainer opens the stream again.
func TestTrainerWhoseEventStreamClosesLeavesTheRingAndComesBack(t *testing.T) {
	agents := trio(t, "trainer-stream", nil)
	var streams []*eventStream
	for _, a := range agents {
		streams = append(streams, newAPIClient(t, a.Socket).events())
	}
	for i, s := range streams {
		s.await(t, "w"+itoa(int64(i))+" sees all three",
			generationWhere(func(r *api.Rendezvous) bool { return r.WorldSize == 3 }))
	}

	crash := time.Now()
	streams[2].close() // the trainer's process ends: the kernel closes its socket
	for i, s := range streams[:2] {
		e := s.await(t, "survivor sees the generation without w2",
			generationWhere(func(r *api.Rendezvous) bool { return !has(r, "w2") }))
		if e.Generation.WorldSize != 2 || e.Generation.State != record.StateActive {
			t.Fatalf("w%d got %+v, want active in a world of 2", i, e.Generation)
		}
		t.Logf("w%d: generation %d without w2 %s after its trainer's stream closed (%s)",
			i, e.Generation.Generation, time.Since(crash).Round(time.Millisecond), e.Generation.Reason)
	}

	back := time.Now()
	c2 := newAPIClient(t, agents[2].Socket)
	restarted := c2.events() // the restarted trainer
	restarted.await(t, "w2 excluded while its trainer was gone",
		generationWhere(func(r *api.Rendezvous) bool { return !has(r, "w2") }))
	for i, s := range streams[:2] {
		e := s.await(t, "survivor sees w2 back",
			generationWhere(func(r *api.Rendezvous) bool { return has(r, "w2") }))
		t.Logf("w%d: generation %d with w2 again %s after its trainer came back (%s)",
			i, e.Generation.Generation, time.Since(back).Round(time.Millisecond), e.Generation.Reason)
	}
	r := restarted.await(t, "w2 active again", generationWhere(func(r *api.Rendezvous) bool {
		return r.State == record.StateActive
	})).Generation
	if r.WorldSize != 3 {
		t.Fatalf("w2 came back into %+v, want a world of 3", r)
	}
}

// A member of two slots whose one slot process dies (its stream, naming
// its slot, closes) leaves the ring though the other slot's stream stays
// open, and enters it again once that process is back.
func TestMemberWithASlotProcessGoneLeavesTheRingUntilItIsBack(t *testing.T) {
	agents := trio(t, "trainer-slots", func(id string, c *sidecar.Config) {
		if id == "w2" {
			c.Slots = 2
		}
	})
	survivors := []*eventStream{newAPIClient(t, agents[0].Socket).events(), newAPIClient(t, agents[1].Socket).events()}
	c2 := newAPIClient(t, agents[2].Socket)
	slot0, slot1 := c2.eventsAt("/v1/events?local_rank=0"), c2.eventsAt("/v1/events?local_rank=1")
	for _, s := range append(survivors, slot0) {
		s.await(t, "all three in a world of 4", generationWhere(func(r *api.Rendezvous) bool { return r.WorldSize == 4 }))
	}

	crash := time.Now()
	slot1.close()
	for i, s := range survivors {
		e := s.await(t, "survivor sees the generation without w2",
			generationWhere(func(r *api.Rendezvous) bool { return !has(r, "w2") }))
		t.Logf("w%d: generation %d without w2 %s after its slot 1 process's stream closed (%s)",
			i, e.Generation.Generation, time.Since(crash).Round(time.Millisecond), e.Generation.Reason)
	}
	slot0.await(t, "w2's slot 0 told its member is out", generationWhere(func(r *api.Rendezvous) bool { return !has(r, "w2") }))

	c2.eventsAt("/v1/events?local_rank=1") // the restarted slot process
	for _, s := range append(survivors, slot0) {
		s.await(t, "w2 back in a world of 4", generationWhere(func(r *api.Rendezvous) bool { return r.WorldSize == 4 && has(r, "w2") }))
	}
}

// A trainer that only heartbeats is gone once its heartbeats stop for the
// trainer timeout, and back with its next heartbeat.
func TestTrainerWhoseHeartbeatsStopLeavesTheRingAndComesBack(t *testing.T) {
	const timeout = 300 * time.Millisecond
	agents := trio(t, "trainer-beats", func(id string, c *sidecar.Config) {
		if id == "w2" {
			c.TrainerTimeout = timeout
		}
	})
	watch := newAPIClient(t, agents[0].Socket).events()
	watch.await(t, "all three", generationWhere(func(r *api.Rendezvous) bool { return r.WorldSize == 3 }))

	c2 := newAPIClient(t, agents[2].Socket)
	beat := func() {
		t.Helper()
		if resp, body := c2.do("POST", "/v1/heartbeat", `{"step":1,"samples":8,"step_time_s":0.05}`); resp.StatusCode != http.StatusNoContent {
			t.Fatalf("heartbeat: %s %s", resp.Status, body)
		}
	}
	for range 5 {
		beat()
		time.Sleep(timeout / 5) // a trainer's step
	}
	last := time.Now()
	beat()
	e := watch.await(t, "generation without w2 once its heartbeats stopped",
		generationWhere(func(r *api.Rendezvous) bool { return !has(r, "w2") }))
	t.Logf("generation %d without w2 %s after its last heartbeat (timeout %s; %s)",
		e.Generation.Generation, time.Since(last).Round(time.Millisecond), timeout, e.Generation.Reason)

	// The trainer is back and reports its steps again, as it waits for
	// its generation.
	back := time.Now()
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(timeout / 5)
		defer tick.Stop()
		for {
			if resp, err := c2.http.Post("http://sidecar/v1/heartbeat", "application/json",
				strings.NewReader(`{"step":1,"samples":8,"step_time_s":0.05}`)); err == nil {
				resp.Body.Close()
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	defer func() { close(stop); <-stopped }()
	e = watch.await(t, "generation with w2 after its heartbeats resumed",
		generationWhere(func(r *api.Rendezvous) bool { return has(r, "w2") }))
	t.Logf("generation %d with w2 again %s after its heartbeats resumed (%s)",
		e.Generation.Generation, time.Since(back).Round(time.Millisecond), e.Generation.Reason)
}

// A trainer that asks to leave and then exits is drained, not taken for
// gone: its sidecar leaves cleanly.
func TestTrainerThatLeavesAndExitsIsDrained(t *testing.T) {
	agents := trio(t, "trainer-leave", nil)
	watch := newAPIClient(t, agents[0].Socket).events()
	watch.await(t, "all three", generationWhere(func(r *api.Rendezvous) bool { return r.WorldSize == 3 }))
	c2 := newAPIClient(t, agents[2].Socket)
	s2 := c2.events()
	if resp, body := c2.do("POST", "/v1/leave", ""); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("leave: %s %s", resp.Status, body)
	}
	s2.close()
	e := watch.await(t, "generation without w2", generationWhere(func(r *api.Rendezvous) bool { return !has(r, "w2") }))
	if e.Generation.Reason != "drain w2" {
		t.Errorf("reason %q, want the drain's", e.Generation.Reason)
	}
	if err := agents[2].Stop(); err != nil {
		t.Fatalf("drained sidecar returned %v, want nil", err)
	}
}

// A trainer in restart mode (`ringside exec`, whose event stream says
// ?mode=restart) is in the member record by the time the member enters the
// ring, so the leader batches that join, and the later ones, as restart
// mode's.
func TestARestartModeTrainerIsPublishedAsItsMemberEntersTheRing(t *testing.T) {
	srv := etcdtest.Start(t)
	client := etcdtest.Client(t, srv)
	w0 := sidecartest.Start(t, srv.Endpoints(), "trainer-mode", "w0", func(c *sidecar.Config) { c.AwaitTrainer = true })
	key := coordinator.DefaultConfig("default", "trainer-mode").Prefix() + record.MembersDir + "w0"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := client.Get(ctx, key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("members/w0: %v (%d keys)", err, len(resp.Kvs))
	}
	changes := client.Watch(ctx, key, clientv3.WithRev(resp.Header.Revision+1))
	newAPIClient(t, w0.Socket).eventsAt("/v1/events?mode=" + api.ModeRestart)
	for wr := range changes {
		for _, ev := range wr.Events {
			info, err := record.DecodeMember(string(ev.Kv.Key), ev.Kv.Value, ev.Kv.CreateRevision)
			if err != nil {
				t.Fatalf("members/w0: %v", err)
			}
			if info.State == record.StateActive {
				if !info.RestartMode {
					t.Fatalf("w0 entered the ring as %+v, without its restart mode", info)
				}
				return
			}
		}
	}
	t.Fatal("w0 did not enter the ring within 30s of its trainer's attach")
}
