package jobstatus

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ringside/ringside/coordinator"
	"github.com/ringside/ringside/coordinator/record"
	"github.com/ringside/ringside/internal/etcdtest"
)

// kv is one key of a job, relative to its prefix, written in table order
// (which is also the members' join order).
type kv struct{ key, value string }

// genBuilder writes generation values; ranks and world size follow from
// the members' slots.
type genBuilder struct{ g record.Generation }

func generation(n int64) *genBuilder {
	return &genBuilder{record.Generation{Number: n, MasterPort: 29500 + int(n), Leader: "w0", Reason: "test"}}
}

func (b *genBuilder) with(id string, slots int) *genBuilder {
	if len(b.g.Members) == 0 {
		b.g.MasterAddr = addrOf(id)
	}
	b.g.Members = append(b.g.Members, record.RankedMember{ID: id, Addr: addrOf(id), Rank: b.g.WorldSize, Slots: slots})
	b.g.WorldSize += slots
	return b
}

func (b *genBuilder) standby(ids ...string) *genBuilder {
	b.g.Standby = append(b.g.Standby, ids...)
	return b
}

func (b *genBuilder) stopped(restarts int64, why string) *genBuilder {
	b.g.Restarts, b.g.Stop = restarts, &record.Stop{Message: why, ExitCode: 1}
	return b
}

func (b *genBuilder) kv() kv { return kv{"generation", mustJSON(b.g)} }

func addrOf(id string) string { return "10.0.0.1" + strings.TrimPrefix(id, "w") }

func member(id string, slots int, state record.State) kv {
	return kv{"members/" + id, mustJSON(record.MemberInfo{ID: id, Addr: addrOf(id), Slots: slots, State: state})}
}

func status(id string, step int64, samplesPerSec, p50 float64) kv {
	st := record.Status{Step: step, SamplesPerSec: samplesPerSec, StepTimeP50S: p50, Generation: 1, Time: time.Now()}
	return kv{"status/" + id, mustJSON(st)}
}

func election(leaseHex, id string) kv { return kv{"election/" + leaseHex, id} }

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// reported marks a member row that has a heartbeat; its age is checked apart.
func reported(step int64, samplesPerSec, p50 float64) func(*Member) {
	return func(m *Member) {
		zero := 0.0
		m.Step, m.SamplesPerSec, m.StepTimeP50S, m.LastHeartbeatAgeS = step, samplesPerSec, p50, &zero
		m.HeartbeatGeneration = 1
	}
}

func row(id string, rank, slots int, state record.State, mutate ...func(*Member)) Member {
	addr := addrOf(id)
	m := Member{ID: id, Addr: addr, Rank: rank, Slots: slots, State: state}
	for _, f := range mutate {
		f(&m)
	}
	return m
}

func TestReadBuildsTheSnapshotFromTheJobKeys(t *testing.T) {
	srv := etcdtest.Start(t)
	client := etcdtest.Client(t, srv)
	tests := []struct {
		name string
		keys []kv
		want Snapshot
	}{{
		name: "a generation of three with statuses lists its members in ring order with their heartbeats",
		keys: []kv{
			member("w0", 2, record.StateActive), member("w1", 1, record.StateActive), member("w2", 1, record.StateActive),
			generation(1).with("w1", 1).with("w0", 2).with("w2", 1).kv(),
			election("7a1", "w1"), election("7a2", "w0"),
			status("w0", 120, 200, 0.25), status("w1", 121, 100, 0.2), status("w2", 119, 100.5, 0.3),
		},
		want: Snapshot{
			Generation: 1, Reason: "test", Leader: "w1", CommittedBy: "w0", WorldSize: 4, Master: "10.0.0.11:29501",
			Members: []Member{
				row("w1", 0, 1, record.StateActive, reported(121, 100, 0.2)),
				row("w0", 1, 2, record.StateActive, reported(120, 200, 0.25)),
				row("w2", 3, 1, record.StateActive, reported(119, 100.5, 0.3)),
			},
			Totals: Totals{SamplesPerSec: 400.5},
		},
	}, {
		name: "a draining member keeps its place and shows as draining",
		keys: []kv{
			member("w0", 1, record.StateActive), member("w1", 1, record.StateDraining),
			generation(4).with("w0", 1).with("w1", 1).kv(),
		},
		want: Snapshot{
			Generation: 4, Reason: "test", CommittedBy: "w0", WorldSize: 2, Master: "10.0.0.10:29504",
			Members: []Member{row("w0", 0, 1, record.StateActive), row("w1", 1, 1, record.StateDraining)},
		},
	}, {
		name: "a member of the generation that is no longer registered is gone",
		keys: []kv{
			member("w0", 1, record.StateActive),
			generation(2).with("w0", 1).with("w1", 1).kv(),
			status("w0", 5, 10, 0.1),
		},
		want: Snapshot{
			Generation: 2, Reason: "test", CommittedBy: "w0", WorldSize: 2, Master: "10.0.0.10:29502",
			Members: []Member{row("w0", 0, 1, record.StateActive, reported(5, 10, 0.1)), row("w1", 1, 1, record.StateGone)},
			Totals:  Totals{SamplesPerSec: 10},
		},
	}, {
		name: "members outside the generation are waiting or draining, standby members only listed",
		keys: []kv{
			member("w0", 1, record.StateActive), member("w1", 1, record.StateActive),
			member("w2", 1, record.StateDraining), member("w3", 1, record.StateActive),
			generation(3).with("w0", 1).standby("w1").kv(),
		},
		want: Snapshot{
			Generation: 3, Reason: "test", CommittedBy: "w0", WorldSize: 1, Master: "10.0.0.10:29503",
			Members: []Member{row("w0", 0, 1, record.StateActive), row("w2", -1, 1, record.StateDraining), row("w3", -1, 1, record.StateWaiting)},
			Standby: []string{"w1"},
		},
	}, {
		name: "malformed generation, member and status values become warnings",
		keys: []kv{
			{"generation", `{"number":`},
			member("w0", 1, record.StateActive),
			{"members/w1", `not json`},
			{"members/w2", mustJSON(record.MemberInfo{ID: "w9", Addr: "x", Slots: 1, State: record.StateActive})},
			{"members/w3", mustJSON(record.MemberInfo{ID: "w3", Addr: "x", Slots: 0, State: "sleeping"})},
			{"status/w0", `{"step":"many"}`},
		},
		want: Snapshot{
			Members: []Member{row("w0", -1, 1, record.StateWaiting)},
			Warnings: []string{
				"/ringside/default/malformed/generation: malformed generation: unexpected end of JSON input",
				"/ringside/default/malformed/members/w1: malformed member: invalid character 'o' in literal null (expecting 'u')",
				`/ringside/default/malformed/members/w2: malformed member: id "w9" does not match the key`,
				"/ringside/default/malformed/members/w3: malformed member: slots must be at least 1, got 0\nstate \"sleeping\" is not \"active\", \"draining\" or \"pending\"",
				"/ringside/default/malformed/status/w0: malformed status: json: cannot unmarshal string into Go struct field Status.step of type int64",
			},
		},
	}, {
		name: "a member of the generation with a malformed record is unknown",
		keys: []kv{
			{"members/w0", `{}`},
			generation(1).with("w0", 1).kv(),
			{"generation-next", `ignored: not a key the snapshot knows`},
		},
		want: Snapshot{
			Generation: 1, Reason: "test", CommittedBy: "w0", WorldSize: 1, Master: "10.0.0.10:29501",
			Members:  []Member{row("w0", 0, 1, record.StateUnknown)},
			Warnings: []string{"/ringside/default/unknown/members/w0: malformed member: id is empty\naddr is empty\nslots must be at least 1, got 0\nstate \"\" is not \"active\", \"draining\" or \"pending\""},
		},
	}, {
		name: "a generation that breaks its own rules is a warning",
		keys: []kv{{"generation", mustJSON(record.Generation{Number: 0})}},
		want: Snapshot{
			Members:  []Member{},
			Warnings: []string{"/ringside/default/numberless/generation: malformed generation: number 0 is not positive"},
		},
	}, {
		name: "a job without a generation lists its registered members as waiting, in join order",
		keys: []kv{member("w2", 1, record.StateActive), member("w0", 2, record.StateActive), status("w2", 0, 0, 0)},
		want: Snapshot{
			Members: []Member{row("w2", -1, 1, record.StateWaiting, reported(0, 0, 0)), row("w0", -1, 2, record.StateWaiting)},
		},
	}, {
		name: "a job that trainer crashes stopped says why, and counts its restarts",
		keys: []kv{
			member("w0", 1, record.StateActive),
			generation(9).with("w0", 1).stopped(2, "worker w0 exits 1, and the job has no restart left (2 of --max-restarts 2 spent)").kv(),
			{"crashes/w0", mustJSON(record.Crash{Generation: 8, ExitCode: 1, MaxRestarts: 2})},
		},
		want: Snapshot{
			Generation: 9, Reason: "test", CommittedBy: "w0", WorldSize: 1, Master: "10.0.0.10:29509", Restarts: 2,
			Stopped: "worker w0 exits 1, and the job has no restart left (2 of --max-restarts 2 spent)",
			Members: []Member{row("w0", 0, 1, record.StateActive)},
		},
	}, {
		name: "a finishing job names the members whose trainers finished in its generation",
		keys: []kv{
			member("w0", 1, record.StateActive),
			generation(9).with("w0", 1).with("w1", 1).with("w2", 1).kv(),
			{"crashes/w1", mustJSON(record.Crash{Generation: 9, RanS: 60, Finished: true})},
			{"crashes/w2", mustJSON(record.Crash{Generation: 8, RanS: 60, Finished: true})},
		},
		want: Snapshot{
			Generation: 9, Reason: "test", CommittedBy: "w0", WorldSize: 3, Master: "10.0.0.10:29509",
			Finished: []string{"w1"},
			Members:  []Member{row("w0", 0, 1, record.StateActive), row("w1", 1, 1, record.StateGone), row("w2", 2, 1, record.StateGone)},
		},
	}, {
		name: "a job with no keys is empty",
		want: Snapshot{Members: []Member{}},
	}}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			job := jobName(tt.name, i)
			prefix := coordinator.DefaultConfig("default", job).Prefix()
			ctx := context.Background()
			for _, k := range tt.keys {
				if _, err := client.Put(ctx, prefix+k.key, k.value); err != nil {
					t.Fatal(err)
				}
			}
			got, err := Read(ctx, client, "default", job)
			if err != nil {
				t.Fatal(err)
			}
			tt.want.Namespace, tt.want.Job = "default", job
			if got.Time.IsZero() || got.Revision == 0 {
				t.Errorf("time %v, revision %d: want both set", got.Time, got.Revision)
			}
			if diff := cmp.Diff(tt.want, got, snapshotCmp...); diff != "" {
				t.Errorf("snapshot (-want +got):\n%s", diff)
			}
		})
	}
}

// jobName picks the job each table case writes under. Two cases name their
// job, because their warnings carry the key.
func jobName(name string, i int) string {
	switch {
	case strings.HasPrefix(name, "malformed"):
		return "malformed"
	case strings.Contains(name, "malformed record"):
		return "unknown"
	case strings.Contains(name, "breaks its own rules"):
		return "numberless"
	}
	return fmt.Sprintf("job%d", i)
}

// snapshotCmp ignores what depends on when the test ran; heartbeat ages
// must only be present or absent alike.
var snapshotCmp = []cmp.Option{
	cmpopts.IgnoreFields(Snapshot{}, "Time", "Revision"),
	cmp.Comparer(func(a, b *float64) bool { return (a == nil) == (b == nil) }),
}

func TestReadMeasuresHeartbeatAgeFromTheStatusTime(t *testing.T) {
	srv := etcdtest.Start(t)
	client := etcdtest.Client(t, srv)
	ctx := context.Background()
	written := time.Now().Add(-3 * time.Second)
	st := mustJSON(record.Status{Step: 1, Time: written})
	if _, err := client.Put(ctx, "/ringside/default/aged/status/w0", st); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Put(ctx, "/ringside/default/aged/members/w0", member("w0", 1, record.StateActive).value); err != nil {
		t.Fatal(err)
	}
	got, err := Read(ctx, client, "default", "aged")
	if err != nil {
		t.Fatal(err)
	}
	age := got.Members[0].LastHeartbeatAgeS
	want := got.Time.Sub(written).Seconds()
	if age == nil || *age < want-0.001 || *age > want+0.001 {
		t.Fatalf("heartbeat age %v, want %.3f (read at %v, written at %v)", age, want, got.Time, written)
	}
}

func TestReadRejectsABadJobName(t *testing.T) {
	// The name is checked before etcd is asked: no client is needed.
	for _, job := range []string{"", "a/b"} {
		if _, err := Read(context.Background(), (*clientv3.Client)(nil), "default", job); err == nil {
			t.Errorf("Read(job %q) succeeded, want an error", job)
		}
	}
}

func TestReadCarriesTheHeartbeatsGenerationAndGNS(t *testing.T) {
	srv := etcdtest.Start(t)
	client := etcdtest.Client(t, srv)
	ctx := context.Background()
	gns := 1536.5
	keys := []kv{
		member("w0", 1, record.StateActive), member("w1", 1, record.StateActive),
		{"status/w0", mustJSON(record.Status{Step: 9, Generation: 3, GNS: &gns, Time: time.Now()})},
		{"status/w1", mustJSON(record.Status{Step: 9, Generation: 2, Time: time.Now()})},
	}
	for _, k := range keys {
		if _, err := client.Put(ctx, "/ringside/default/gns/"+k.key, k.value); err != nil {
			t.Fatal(err)
		}
	}
	got, err := Read(ctx, client, "default", "gns")
	if err != nil {
		t.Fatal(err)
	}
	w0, w1 := got.Members[0], got.Members[1]
	if w0.HeartbeatGeneration != 3 || w0.GNS == nil || *w0.GNS != gns {
		t.Errorf("w0: heartbeat generation %d, GNS %v; want 3 and %v", w0.HeartbeatGeneration, w0.GNS, gns)
	}
	if w1.HeartbeatGeneration != 2 || w1.GNS != nil {
		t.Errorf("w1: heartbeat generation %d, GNS %v; want 2 and none", w1.HeartbeatGeneration, w1.GNS)
	}
}

func TestReadCarriesComputeTimesAndTheLeadersStragglers(t *testing.T) {
	srv := etcdtest.Start(t)
	client := etcdtest.Client(t, srv)
	ctx := context.Background()
	finding := record.Straggler{Generation: 2, SinceStep: 40, Step: 71, ComputeTimeS: 0.08, MedianComputeTimeS: 0.05, Action: record.ActionReport, Leader: "w0"}
	keys := []kv{
		member("w0", 1, record.StateActive), member("w1", 1, record.StateActive),
		{"status/w1", mustJSON(record.Status{Step: 71, Generation: 2, ComputeTimeS: 0.08, WaitTimeS: 0.01, Time: time.Now()})},
		{"stragglers/w1", mustJSON(finding)},
		{"stragglers/w9", `{"generation":0}`},
		{"drains", `{"seconds":[1.5,0.25]}`},
	}
	for _, k := range keys {
		if _, err := client.Put(ctx, "/ringside/default/slow/"+k.key, k.value); err != nil {
			t.Fatal(err)
		}
	}
	got, err := Read(ctx, client, "default", "slow")
	if err != nil {
		t.Fatal(err)
	}
	if w1 := got.Members[1]; w1.ComputeTimeS != 0.08 || w1.WaitTimeS != 0.01 {
		t.Errorf("w1: compute %g, wait %g; want 0.08 and 0.01", w1.ComputeTimeS, w1.WaitTimeS)
	}
	if len(got.Stragglers) != 1 || got.Stragglers[0].Member != "w1" || got.Stragglers[0].SinceStep != 40 {
		t.Errorf("stragglers %+v, want w1's finding only", got.Stragglers)
	}
	if !slices.Equal(got.DrainSeconds, []float64{1.5, 0.25}) {
		t.Errorf("drain seconds %v, want [1.5 0.25]", got.DrainSeconds)
	}
	if len(got.Warnings) != 1 || !strings.Contains(got.Warnings[0], "stragglers/w9") {
		t.Errorf("warnings %q, want the malformed finding of w9 named", got.Warnings)
	}
}
