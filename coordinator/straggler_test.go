package coordinator

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ringside/ringside/coordinator/record"
)

// stragglerJob is a ring of n one-slot members w0..w(n-1) in generation 1,
// whose statuses the test advances.
type stragglerJob struct {
	t        *testing.T
	s        *stragglers
	v        stragglerView
	named    []string // every member named so far, in order
	cleared  []string
	lastPuts map[string]record.Straggler
	stale    string // a member whose trainer still reports the generation before
}

func newStragglerJob(t *testing.T, n int, cfg StragglerConfig) *stragglerJob {
	g := &record.Generation{Number: 1, WorldSize: n}
	members := map[string]record.MemberInfo{}
	for i := range n {
		id := fmt.Sprintf("w%d", i)
		g.Members = append(g.Members, record.RankedMember{ID: id, Rank: i, Slots: 1})
		members[id] = record.MemberInfo{ID: id, Node: "node-" + id, State: record.StateActive, Slots: 1}
	}
	return &stragglerJob{t: t, s: newStragglers(cfg), v: stragglerView{
		gen: g, members: members, statuses: map[string]record.Status{}, min: 1, leader: "w0", now: time.Unix(0, 0),
	}}
}

// report sets every member's status at step: compute 50 ms, times the
// factor slow gives it.
func (j *stragglerJob) report(step int64, slow map[string]float64) {
	for _, m := range j.v.gen.Members {
		f := slow[m.ID]
		if f == 0 {
			f = 1
		}
		st := record.Status{Step: step, Generation: j.v.gen.Number, ComputeTimeS: 0.05 * f}
		if m.ID == j.stale {
			st.Generation--
		}
		j.v.statuses[m.ID] = st
	}
	ch := j.s.observe(j.v)
	j.s.apply(ch)
	j.lastPuts = ch.put
	for id := range ch.put {
		j.named = append(j.named, id)
	}
	j.cleared = append(j.cleared, ch.clear...)
}

// run reports every `every` steps from step from to step to.
func (j *stragglerJob) run(from, to, every int64, slow map[string]float64) {
	for step := from; step <= to; step += every {
		j.report(step, slow)
	}
}

func TestAMemberSlowForTheWindowIsNamedOnce(t *testing.T) {
	j := newStragglerJob(t, 8, DefaultStragglerConfig())
	j.run(4, 100, 4, nil)
	if len(j.named) != 0 {
		t.Fatalf("named %v in a clean run", j.named)
	}
	// Slow from step 101: the status of step 104 is the first to show it;
	// 24 slow steps of the 30-step window name it.
	for step := int64(104); step <= 120; step += 4 {
		j.report(step, map[string]float64{"w3": 1.5})
		if len(j.named) != 0 {
			t.Fatalf("w3 named at step %d, after %d slow steps: want 24 of the 30-step window", step, step-100)
		}
	}
	j.report(124, map[string]float64{"w3": 1.5})
	if !slices.Equal(j.named, []string{"w3"}) {
		t.Fatalf("named %v at step 124 (24 slow steps), want w3", j.named)
	}
	f := j.lastPuts["w3"]
	if f.SinceStep != 101 || f.Step != 124 || f.Action != record.ActionReport || f.Node != "node-w3" || f.Ratio() < 1.49 {
		t.Errorf("finding %+v, want since step 101, step 124, report, node-w3, ratio 1.5", f)
	}
	j.run(128, 300, 4, map[string]float64{"w3": 1.5})
	if len(j.named) != 1 {
		t.Errorf("named %v, want w3 once", j.named)
	}
}

func TestAMachineWideStallDoesNotStartTheCountOver(t *testing.T) {
	j := newStragglerJob(t, 8, DefaultStragglerConfig())
	j.run(4, 100, 4, nil)
	j.run(104, 112, 4, map[string]float64{"w3": 1.5})
	// Every member stalls alike for a status: w3 is at the median then.
	stalled := map[string]float64{}
	for i := range 8 {
		stalled[fmt.Sprintf("w%d", i)] = 6
	}
	j.report(116, stalled)
	j.run(120, 128, 4, map[string]float64{"w3": 1.5})
	if !slices.Equal(j.named, []string{"w3"}) {
		t.Fatalf("named %v at step 128 (24 of the last 28 steps slow), want w3", j.named)
	}
}

func TestShortSlowBurstsAndNoiseAreNotNamed(t *testing.T) {
	j := newStragglerJob(t, 8, DefaultStragglerConfig())
	j.run(4, 100, 4, nil)
	j.run(104, 120, 4, map[string]float64{"w2": 2}) // a checkpoint write: 20 steps
	j.run(124, 200, 4, map[string]float64{"w2": 1.25, "w5": 0.8})
	for step := int64(204); step <= 400; step += 4 { // slow every other status: half the window
		f := 1.0
		if step%8 == 0 {
			f = 1.5
		}
		j.report(step, map[string]float64{"w6": f})
	}
	if len(j.named) != 0 {
		t.Fatalf("named %v", j.named)
	}
}

func TestANamedMemberIsClearedOnlyAfterAWindowBackAtPace(t *testing.T) {
	j := newStragglerJob(t, 8, DefaultStragglerConfig())
	j.run(4, 100, 4, map[string]float64{"w1": 1.6})
	if !slices.Equal(j.named, []string{"w1"}) {
		t.Fatalf("named %v, want w1", j.named)
	}
	// In the band between the clearing threshold (1.15) and the factor:
	// still named.
	j.run(104, 200, 4, map[string]float64{"w1": 1.2})
	if len(j.cleared) != 0 {
		t.Fatalf("cleared %v in the hysteresis band", j.cleared)
	}
	j.run(204, 220, 4, map[string]float64{"w1": 1.05})
	if len(j.cleared) != 0 {
		t.Fatalf("cleared %v before most of a window back at pace", j.cleared)
	}
	j.report(224, map[string]float64{"w1": 1.05})
	if !slices.Equal(j.cleared, []string{"w1"}) {
		t.Fatalf("cleared %v, want w1 after 24 steps back at pace", j.cleared)
	}
}

func TestNoMoreThanTheShareIsNamedAndTheSlowestFirst(t *testing.T) {
	j := newStragglerJob(t, 8, DefaultStragglerConfig()) // a quarter of 8: two
	j.run(4, 100, 4, map[string]float64{"w1": 1.5, "w4": 1.9, "w6": 1.7})
	if slices.Sort(j.named); !slices.Equal(j.named, []string{"w4", "w6"}) {
		t.Fatalf("named %v, want the two slowest, w4 and w6", j.named)
	}
	cfg := DefaultStragglerConfig()
	cfg.MaxShare = 0.1 // at least one
	j = newStragglerJob(t, 8, cfg)
	j.run(4, 100, 4, map[string]float64{"w1": 1.5, "w4": 1.9, "w6": 1.7})
	if !slices.Equal(j.named, []string{"w4"}) {
		t.Fatalf("named %v, want the slowest only, w4", j.named)
	}
}

func TestNobodyIsNamedWhileAResizeIsInFlight(t *testing.T) {
	for _, tt := range []struct {
		name   string
		resize func(j *stragglerJob)
	}{
		{"joins are batching", func(j *stragglerJob) { j.v.resizing = true }},
		{"a member drains", func(j *stragglerJob) {
			info := j.v.members["w7"]
			info.State = record.StateDraining
			j.v.members["w7"] = info
		}},
		{"a trainer still reports the previous generation", func(j *stragglerJob) {
			g := *j.v.gen
			g.Number = 2
			j.v.gen, j.stale = &g, "w0"
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			j := newStragglerJob(t, 8, DefaultStragglerConfig())
			j.run(4, 20, 4, nil)
			tt.resize(j)
			j.run(24, 100, 4, map[string]float64{"w3": 1.5})
			if len(j.named) != 0 {
				t.Fatalf("named %v during the resize", j.named)
			}
		})
	}
}

func TestReplaceHonoursTheMinWorldSize(t *testing.T) {
	cfg := DefaultStragglerConfig()
	cfg.Action = record.ActionReplace
	for _, tt := range []struct {
		min  int
		want record.StragglerAction
	}{{7, record.ActionReplace}, {8, record.ActionReport}} {
		j := newStragglerJob(t, 8, cfg)
		j.v.min = tt.min
		j.run(4, 100, 4, map[string]float64{"w2": 1.5})
		f := j.lastPutsOrNamed(t, "w2")
		if f.Action != tt.want || f.Replaceable != (tt.want == record.ActionReplace) {
			t.Errorf("min %d of 8: action %s, replaceable %v; want %s", tt.min, f.Action, f.Replaceable, tt.want)
		}
	}
}

func (j *stragglerJob) lastPutsOrNamed(t *testing.T, id string) record.Straggler {
	t.Helper()
	f, ok := j.s.named[id]
	if !ok {
		t.Fatalf("%s not named (named %v)", id, j.named)
	}
	return f
}

func TestAFindingGoesWithItsMemberAndFewMembersAreNotCompared(t *testing.T) {
	j := newStragglerJob(t, 4, DefaultStragglerConfig())
	j.run(4, 100, 4, map[string]float64{"w3": 1.5})
	if !slices.Equal(j.named, []string{"w3"}) {
		t.Fatalf("named %v, want w3", j.named)
	}
	g := &record.Generation{Number: 2, WorldSize: 3, Members: j.v.gen.Members[:3]}
	j.v.gen = g
	j.report(104, map[string]float64{"w2": 3})
	if !slices.Equal(j.cleared, []string{"w3"}) {
		t.Fatalf("cleared %v, want w3, which left the ring", j.cleared)
	}
	j.run(108, 300, 4, map[string]float64{"w2": 3})
	if !slices.Equal(j.named, []string{"w3", "w2"}) {
		t.Fatalf("named %v, want w3 then w2: a ring of 3 has a median", j.named)
	}
	two := newStragglerJob(t, 2, DefaultStragglerConfig())
	two.run(4, 300, 4, map[string]float64{"w1": 3})
	if len(two.named) != 0 {
		t.Fatalf("named %v in a ring of two, where neither is the pace", two.named)
	}
}

func TestStragglerConfigValidateNamesTheField(t *testing.T) {
	for _, tt := range []struct {
		change func(*StragglerConfig)
		want   string
	}{
		{func(c *StragglerConfig) { c.Factor = 1 }, "straggler factor"},
		{func(c *StragglerConfig) { c.Window = 0 }, "straggler window"},
		{func(c *StragglerConfig) { c.MaxShare = 1.5 }, "straggler max share"},
		{func(c *StragglerConfig) { c.Action = "evict" }, "straggler policy"},
	} {
		cfg := DefaultConfig("default", "job")
		tt.change(&cfg.Straggler)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Validate() = %v, want an error naming %q", err, tt.want)
		}
	}
}

// The leader names a slow member in etcd from the members' statuses, and
// the member follows the finding; it is cleared once the member leaves.
func TestTheLeaderStoresAFindingThatTheMemberFollows(t *testing.T) {
	j, client := testJob(t, func(c *Config) { c.Straggler.Window = 10 })
	var ms []*Member
	for _, id := range ids("w", 4) {
		ms = append(ms, join(t, j, id))
	}
	g := await(t, ms[0], "the ring of 4", hasIDs(ids("w", 4)...))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	findings := make(chan *record.Straggler, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		ms[3].FollowStraggler(ctx, func(s *record.Straggler) { findings <- s })
	}()
	defer func() { cancel(); <-done }()
	if s := <-findings; s != nil {
		t.Fatalf("a finding %+v before any status", s)
	}
	// Statuses of 5 steps each, w3 computing 1.5 times as long, until the
	// leader names it.
	var named *record.Straggler
	for step := int64(5); named == nil && step < 500; step += 5 {
		for i, m := range ms {
			compute := 0.05
			if i == 3 {
				compute = 0.075
			}
			if err := m.PutStatus(ctx, record.Status{Step: step, Generation: g.Number, ComputeTimeS: compute, WaitTimeS: 0.1 - compute}); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case named = <-findings:
		case <-time.After(50 * time.Millisecond): // the next round of statuses
		}
	}
	if named == nil || named.Generation != g.Number || named.Action != record.ActionReport || named.Step < 10 || named.Step > 20 {
		t.Fatalf("finding %+v, want w3 named in generation %d within 20 steps, to report", named, g.Number)
	}
	resp, err := client.Get(ctx, j.cfg.Prefix()+record.StragglersDir, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Key) != j.cfg.Prefix()+"stragglers/w3" {
		t.Fatalf("stragglers/ holds %v (%v), want stragglers/w3 only", resp.Kvs, err)
	}
	// w3 leaves: the next status the leader sees clears its finding.
	if err := ms[3].Leave(ctx); err != nil {
		t.Fatal(err)
	}
	await(t, ms[0], "the ring without w3", hasIDs("w0", "w1", "w2"))
	if err := ms[0].PutStatus(ctx, record.Status{Step: 1000, Generation: g.Number + 1, ComputeTimeS: 0.05}); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-findings:
		if s != nil {
			t.Fatalf("finding %+v after w3 left, want it cleared", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the finding of w3 was not cleared within 10 s of its leaving")
	}
}
