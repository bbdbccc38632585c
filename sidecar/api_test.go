package sidecar_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ringside/ringside/coordinator"
	"github.com/ringside/ringside/coordinator/jobstatus"
	"github.com/ringside/ringside/coordinator/record"
	"github.com/ringside/ringside/internal/etcdtest"
	"github.com/ringside/ringside/sidecar"
	"github.com/ringside/ringside/sidecar/sidecartest"
	"github.com/ringside/ringside/trainer/api"
)

// startAgent runs an in-process sidecar of job "api".
func startAgent(t *testing.T, endpoints []string, id string) (*sidecar.Agent, *apiClient, func() error) {
	t.Helper()
	a := sidecartest.Start(t, endpoints, "api", id)
	c := newAPIClient(t, a.Socket)
	c.awaitRendezvous("first generation of "+id, func(r *api.Rendezvous) bool { return has(r, id) })
	return a.Agent, c, a.Stop
}

func TestAPIContract(t *testing.T) {
	srv := etcdtest.Start(t)
	a, c, _ := startAgent(t, srv.Endpoints(), "w0")
	r := c.rendezvous(0)
	if r.State != record.StateActive || r.Rank != 0 || r.WorldSize != 1 || r.APIVersion != "v1" || r.MasterAddr != "127.0.0.1" {
		t.Fatalf("rendezvous = %+v, want w0 active at rank 0 of 1", r)
	}
	tests := []struct {
		name, method, path, body string
		wantCode                 int
		wantInBody               string
	}{
		{"unknown path is a JSON 404", "GET", "/v2/rendezvous", "", 404, `"error"`},
		{"wrong method is a JSON 405", "POST", "/v1/rendezvous", "", 405, "use GET"},
		{"rendezvous with a bad after", "GET", "/v1/rendezvous?after=x", "", 400, "after"},
		{"rendezvous with a bad timeout", "GET", "/v1/rendezvous?timeout=forever", "", 400, "timeout"},
		{"rendezvous times out with no content", "GET", "/v1/rendezvous?after=1000&timeout=20ms", "", 204, ""},
		{"heartbeat that is not JSON", "POST", "/v1/heartbeat", "{step", 400, "bad JSON"},
		{"heartbeat with an unknown field", "POST", "/v1/heartbeat", `{"stepp":1}`, 400, "unknown field"},
		{"heartbeat with a negative step", "POST", "/v1/heartbeat", `{"step":-1}`, 400, "step must not be negative"},
		{"heartbeat with a wrong type", "POST", "/v1/heartbeat", `{"step":"one"}`, 400, "bad JSON"},
		{"heartbeat with a negative gradient noise scale", "POST", "/v1/heartbeat", `{"step":1,"gns":-2}`, 400, "gns (the gradient noise scale) must be finite and not negative"},
		{"heartbeat with a non-finite gradient noise scale", "POST", "/v1/heartbeat", `{"step":1,"gns":1e999}`, 400, "bad JSON"},
		{"two heartbeats in one body", "POST", "/v1/heartbeat", `{"step":1}{"step":2}`, 400, "more than one"},
		{"heartbeat accepted", "POST", "/v1/heartbeat", heartbeatRequest(t), 204, ""},
		{"failure without a peer", "POST", "/v1/failure", `{}`, 400, "peer is empty"},
		{"failure naming itself", "POST", "/v1/failure", `{"peer":"w0"}`, 400, "itself"},
		{"failure of an unknown peer is checked", "POST", "/v1/failure", failureRequest(t), 202, "checking"},
		{"leave needs POST", "GET", "/v1/leave", "", 405, "use POST"},
		{"events needs GET", "POST", "/v1/events", "", 405, "use GET"},
		{"events in a mode we do not know", "GET", "/v1/events?mode=eager", "", 400, `mode=\"eager\": want live or restart`},
		{"restart with an unknown field", "POST", "/v1/restart", `{"why":1}`, 400, "unknown field"},
		{"restart accepted", "POST", "/v1/restart", restartRequest(t), 202, "restarting"},
		{"restart with an exit code of success", "POST", "/v1/restart", `{"exit_code":0}`, 400, "exit_code must be a failure's"},
		{"restart with a stderr line past its bound", "POST", "/v1/restart", `{"stderr":["` + strings.Repeat("x", 600) + `"]}`, 400, "a stderr line is 600 bytes, more than 512"},
		{"restart with a negative budget", "POST", "/v1/restart", `{"max_restarts":-1}`, 400, "max_restarts -1 or crash_loop"},
		{"crash report accepted", "POST", "/v1/restart", crashRequest(t), 202, "restarting"},
		{"finish with an unknown field", "POST", "/v1/finish", `{"exit_code":0}`, 400, "unknown field"},
		{"finish with a negative run time", "POST", "/v1/finish", `{"ran_s":-1}`, 400, "ran_s -1 is not a run time"},
		{"finish needs POST", "GET", "/v1/finish", "", 405, "use POST"},
		{"finish accepted", "POST", "/v1/finish", `{"ran_s":12.5}`, 202, "finished"},
		{"healthz", "GET", "/v1/healthz", "", 200, "ok"},
		{"readyz once a generation is held", "GET", "/v1/readyz", "", 200, "ready"},
		{"metrics", "GET", "/metrics", "", 200, "ringside_coordinator_generation"},
	}
	// The answers that need a sidecar in a job are pinned here; the others
	// in TestGoldenAnswers.
	golden := map[string]string{
		"failure of an unknown peer is checked": "failure_accepted.json",
		"restart accepted":                      "restart_accepted.json",
		"crash report accepted":                 "restart_accepted.json",
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := c.do(tt.method, tt.path, tt.body)
			if resp.StatusCode != tt.wantCode {
				t.Fatalf("%s %s: %d %s, want %d", tt.method, tt.path, resp.StatusCode, body, tt.wantCode)
			}
			if file, ok := golden[tt.name]; ok {
				checkAnswer(t, file, tt.method, tt.path, resp.StatusCode, body)
			}
			if !strings.Contains(string(body), tt.wantInBody) {
				t.Fatalf("body %s lacks %q", body, tt.wantInBody)
			}
			if tt.wantCode >= 400 {
				var e map[string]string
				if err := json.Unmarshal(body, &e); err != nil || e["error"] == "" {
					t.Fatalf("error body %s is not {\"error\": ...}", body)
				}
			}
			if tt.wantCode == 405 && resp.Header.Get("Allow") == "" {
				t.Fatal("405 without an Allow header")
			}
		})
	}

	// The heartbeat reaches etcd as status/w0.
	client := etcdtest.Client(t, srv)
	key := coordinator.DefaultConfig("default", "api").Prefix() + "status/w0"
	st := awaitKey(t, client, key)
	var status record.Status
	if err := json.Unmarshal(st, &status); err != nil || status.Step != 7 || status.StepTimeS != 0.25 || status.GNS == nil || *status.GNS != 1536.5 {
		t.Fatalf("status %s, want step 7, step time 0.25 and the gradient noise scale 1536.5", st)
	}

	if err := testutil.GatherAndCompare(a.Gatherer(), strings.NewReader(`
# HELP ringside_coordinator_world_size World size (ranks) of the newest committed generation.
# TYPE ringside_coordinator_world_size gauge
ringside_coordinator_world_size 1
# HELP ringside_coordinator_members Members of the newest generation by state (active, standby).
# TYPE ringside_coordinator_members gauge
ringside_coordinator_members{state="active"} 1
ringside_coordinator_members{state="standby"} 0
`), "ringside_coordinator_world_size", "ringside_coordinator_members"); err != nil {
		t.Fatal(err)
	}
	problems, err := testutil.GatherAndLint(a.Gatherer())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "ringside_") {
			t.Errorf("metric %s: %s", p.Metric, p.Text)
		}
	}
	if n, err := testutil.GatherAndCount(a.Gatherer(), "ringside_api_requests_total"); err != nil || n == 0 {
		t.Errorf("API requests counted in %d series (err %v), want some", n, err)
	}
}

func awaitKey(t *testing.T, client *clientv3.Client, key string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	resp, err := client.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) > 0 {
		return resp.Kvs[0].Value
	}
	for wr := range client.Watch(ctx, key, clientv3.WithRev(resp.Header.Revision+1)) {
		for _, ev := range wr.Events {
			if ev.Type == clientv3.EventTypePut {
				return ev.Kv.Value
			}
		}
	}
	t.Fatalf("%s never written", key)
	return nil
}

func TestRendezvousLongPollReturnsOnNewGeneration(t *testing.T) {
	srv := etcdtest.Start(t)
	_, c0, _ := startAgent(t, srv.Endpoints(), "w0")
	first := c0.rendezvous(0)
	got := make(chan *api.Rendezvous, 1)
	go func() {
		resp, body := c0.do("GET", "/v1/rendezvous?after="+itoa(first.Generation)+"&timeout=60s", "")
		var r api.Rendezvous
		if resp.StatusCode == http.StatusOK && json.Unmarshal(body, &r) == nil {
			got <- &r
		} else {
			got <- nil
		}
	}()
	startAgent(t, srv.Endpoints(), "w1")
	select {
	case r := <-got:
		if r == nil || r.Generation <= first.Generation || r.WorldSize != 2 {
			t.Fatalf("long poll answered %+v, want the generation with w0 and w1", r)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("long poll did not return on the new generation")
	}
}

func TestLeaveRequestDrainsAndExitsCleanly(t *testing.T) {
	srv := etcdtest.Start(t)
	_, c0, _ := startAgent(t, srv.Endpoints(), "w0")
	_, c1, stop1 := startAgent(t, srv.Endpoints(), "w1")
	c0.awaitRendezvous("both", func(r *api.Rendezvous) bool { return r.WorldSize == 2 })
	ev := c1.events()
	ev.await(t, "current generation first", func(e api.Event) bool { return e.Type == api.EventGeneration })
	if resp, body := c1.do("POST", "/v1/leave", ""); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("leave: %s %s", resp.Status, body)
	}
	d := ev.await(t, "drain", func(e api.Event) bool { return e.Type == api.EventDrain })
	if d.Deadline == nil || !strings.Contains(d.Reason, "leave") {
		t.Fatalf("drain event %+v lacks a deadline or reason", d)
	}
	r := c0.awaitRendezvous("generation without w1", func(r *api.Rendezvous) bool { return !has(r, "w1") })
	if r.WorldSize != 1 || r.Rank != 0 {
		t.Fatalf("survivor holds %+v, want world 1 rank 0", r)
	}
	if err := stop1(); err != nil {
		t.Fatalf("drained sidecar returned %v, want nil", err)
	}
	// The drain's duration outlives the member, for the controller.
	s, err := jobstatus.Read(context.Background(), etcdtest.Client(t, srv), "default", "api")
	if err != nil {
		t.Fatal(err)
	}
	// The drain ended at the generation without w1, within the harness's
	// 3 s grace.
	if len(s.DrainSeconds) != 1 || s.DrainSeconds[0] <= 0 || s.DrainSeconds[0] > 3 {
		t.Errorf("drains recorded %v, want the one drain's duration, within its grace", s.DrainSeconds)
	}
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

func TestAwaitTrainerJoinsPendingUntilTheFirstRendezvous(t *testing.T) {
	srv := etcdtest.Start(t)
	client, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	_, c0, _ := startAgent(t, srv.Endpoints(), "w0")
	await := func(c *sidecar.Config) { c.AwaitTrainer = true }
	w1 := sidecartest.Start(t, srv.Endpoints(), "api", "w1", await)
	prefix := coordinator.DefaultConfig("default", "api").Prefix()
	var info record.MemberInfo
	if err := json.Unmarshal(awaitKey(t, client, prefix+"members/w1"), &info); err != nil || info.State != record.StatePending {
		t.Fatalf("members/w1 = %+v (%v) before its trainer asked, want state pending", info, err)
	}

	c1 := newAPIClient(t, w1.Socket)
	r := c1.awaitRendezvous("w1 placed once its trainer asked", func(r *api.Rendezvous) bool { return has(r, "w1") })
	if r.WorldSize != 2 || r.State != record.StateActive {
		t.Fatalf("w1 got %+v, want active in a world of 2", r)
	}
	c0.awaitRendezvous("w0 sees w1", func(r *api.Rendezvous) bool { return has(r, "w1") })

	// A pending member drains without waiting for a generation: it is in
	// none.
	w2 := sidecartest.Start(t, srv.Endpoints(), "api", "w2", await, func(c *sidecar.Config) { c.Grace = 10 * time.Minute })
	done := make(chan error, 1)
	go func() { done <- w2.Stop() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("drain of the pending w2: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the pending w2 did not leave within 30s of its drain")
	}
}
