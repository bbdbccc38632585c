package coordinator

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringside/ringside/coordinator/record"
	"github.com/ringside/ringside/internal/etcdtest"
)

// traceback is what a script that loads a torn checkpoint prints.
var traceback = []string{
	"Traceback (most recent call last):",
	`  File "/work/train.py", line 31, in <module>`,
	"    snapshot = torch.load(path)",
	`  File "/usr/lib/python3/dist-packages/torch/serialization.py", line 795, in load`,
	"    return _legacy_load(opened_file, map_location, pickle_module, **pickle_load_args)",
	"EOFError: Ran out of input",
}

// crashIn is a crash of a trainer before its first step in generation g,
// under the default budget.
func crashIn(g *record.Generation, mutate ...func(*record.Crash)) record.Crash {
	c := record.Crash{Generation: g.Number, ExitCode: 1, RanS: 0.8, Stderr: traceback,
		MaxRestarts: 3, CrashLoop: 3, Time: time.Now()}
	for _, f := range mutate {
		f(&c)
	}
	return c
}

func reportCrash(t *testing.T, m *Member, c record.Crash) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.ReportCrash(ctx, c); err != nil {
		t.Fatalf("%s reports its crash: %v", m.ID(), err)
	}
}

// threeMembers joins a (the leader), b and c, each through a job of its
// own as one process per pod, and returns their first generation.
func threeMembers(t *testing.T, mutate ...func(*Config)) (a, b, c *Member, g *record.Generation) {
	t.Helper()
	srv := etcdtest.Start(t)
	client := etcdtest.Client(t, srv)
	a = join(t, newTestJob(t, client, mutate...), "a")
	leaderOf(t, a)
	b, c = join(t, newTestJob(t, client, mutate...), "b"), join(t, newTestJob(t, client, mutate...), "c")
	return a, b, c, await(t, c, "all three", hasIDs("a", "b", "c"))
}

func TestCrashesInOneGenerationRestartTheJobOnceAndCountOnce(t *testing.T) {
	a, b, c, g := threeMembers(t)
	reportCrash(t, b, crashIn(g))
	reportCrash(t, c, crashIn(g))
	next := awaitNewer(t, "a", a.Generations(), g.Number, func(*record.Generation) bool { return true })
	if next.Number != g.Number+1 || next.Restarts != 1 || !hasIDs("a", "b", "c")(next) || !strings.HasPrefix(next.Reason, "restart b: its trainer exits 1 (restart 1 of 3)") {
		t.Fatalf("after two crashes in generation %d: %+v, want generation %d, the same members, restarts 1, for b's crash", g.Number, next, g.Number+1)
	}
	// c's crash, of the same generation, restarts nothing more: the next
	// generation is the next change's, and carries the count on.
	d := join(t, newTestJob(t, a.job.client), "d")
	joined := awaitNewer(t, "d", d.Generations(), next.Number, hasIDs("a", "b", "c", "d"))
	if joined.Number != next.Number+1 || joined.Restarts != 1 {
		t.Fatalf("the join committed generation %d with restarts %d; want %d with 1: c's crash re-formed the job again", joined.Number, joined.Restarts, next.Number+1)
	}
}

func TestACrashWhileAPeersDeathIsConfirmedIsThePeers(t *testing.T) {
	logs := &logLines{}
	a, b, c, g := threeMembers(t, func(cfg *Config) {
		cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
	c.Close() // c's pod dies; its lease still runs out
	ctx := context.Background()
	if v, err := a.Suspect(ctx, "c"); err != nil || v != Voted {
		t.Fatalf("a's vote against c: %v, %v", v, err)
	}
	// b's trainer fails in a collective with c before the second vote.
	reportCrash(t, b, crashIn(g))
	logs.await(t, "waiting for it before the crash counts")
	if v, err := b.SuspectGone(ctx, "c"); err != nil || v != Evicted {
		t.Fatalf("b's vote against c: %v, %v", v, err)
	}
	next := awaitNewer(t, "a", a.Generations(), g.Number, func(*record.Generation) bool { return true })
	if !hasIDs("a", "b")(next) || next.Restarts != 0 || next.Reason != "leave c" {
		t.Fatalf("after b's crash and c's death: %+v; want the generation without c, reason %q, nothing counted", next, "leave c")
	}
}

func TestACrashInAGenerationTheJobLeftIsNotCounted(t *testing.T) {
	a, b, c, g := threeMembers(t)
	ctx := context.Background()
	if err := c.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	left := awaitNewer(t, "a", a.Generations(), g.Number, hasIDs("a", "b"))
	reportCrash(t, b, crashIn(g)) // b's trainer failed as c left
	d := join(t, newTestJob(t, a.job.client), "d")
	joined := awaitNewer(t, "d", d.Generations(), left.Number, hasIDs("a", "b", "d"))
	if joined.Number != left.Number+1 || joined.Restarts != 0 {
		t.Fatalf("the join committed generation %d with restarts %d; want %d with none: b's crash of generation %d counted", joined.Number, joined.Restarts, left.Number+1, g.Number)
	}
}

func TestASpentRestartBudgetStopsTheJobUntilItsPodsAreReplaced(t *testing.T) {
	j, client := testJob(t)
	a := join(t, j, "a")
	g := await(t, a, "a alone", hasIDs("a"))
	boom := func(c *record.Crash) {
		c.MaxRestarts, c.FirstStep, c.ExitCode = 1, true, 3
		c.Stderr = []string{"RuntimeError: CUDA error: an illegal memory access was encountered"}
	}
	reportCrash(t, a, crashIn(g, boom))
	g = awaitNewer(t, "a", a.Generations(), g.Number, func(*record.Generation) bool { return true })
	if g.Restarts != 1 || g.Stop != nil {
		t.Fatalf("after the first crash: %+v, want a restart, counted", g)
	}
	reportCrash(t, a, crashIn(g, boom))
	stop := awaitNewer(t, "a", a.Generations(), g.Number, func(*record.Generation) bool { return true })
	want := "worker a exits 3, and the job has no restart left (1 of --max-restarts 1 spent): RuntimeError: CUDA error: an illegal memory access was encountered"
	if stop.Stop == nil || stop.Stop.Message != want || stop.Stop.ExitCode != 3 || stop.Restarts != 1 {
		t.Fatalf("after the second crash: %+v (stop %+v), want the job stopped with exit code 3: %q", stop, stop.Stop, want)
	}
	// A newcomer changes nothing while a's process is registered; once it
	// is replaced, the job starts afresh.
	b := join(t, newTestJob(t, client), "b")
	if err := a.Leave(context.Background()); err != nil {
		t.Fatal(err)
	}
	fresh := awaitNewer(t, "b", b.Generations(), stop.Number, func(*record.Generation) bool { return true })
	if fresh.Number != stop.Number+1 || !hasIDs("b")(fresh) || fresh.Stop != nil || fresh.Restarts != 0 {
		t.Fatalf("after the stop: %+v; want generation %d of b alone, afresh", fresh, stop.Number+1)
	}
}

func TestAFinishingJobRestartsNobodyAsItsMembersLeave(t *testing.T) {
	a, b, c, g := threeMembers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// b's command exited 0, and its pod goes.
	if err := b.ReportFinished(ctx, record.Crash{Generation: g.Number, RanS: 60, Time: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := b.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	// c's trainer then fails: nothing re-formed around b's leaving, and
	// the job stops rather than restarting without its finished rank.
	reportCrash(t, c, crashIn(g, func(c *record.Crash) { c.FirstStep = true }))
	next := awaitNewer(t, "a", a.Generations(), g.Number, func(*record.Generation) bool { return true })
	want := "worker c exits 1 after b finished: EOFError: Ran out of input, at train.py:31: snapshot = torch.load(path)"
	if next.Number != g.Number+1 || next.Stop == nil || next.Stop.Message != want || !hasIDs("a", "b", "c")(next) {
		t.Fatalf("after b finished and left and c crashed: %+v (stop %+v); want generation %d, the job's stop: %q", next, next.Stop, g.Number+1, want)
	}
}

func TestFailuresBeforeTheFirstStepInARowStopTheJobNamingTheCause(t *testing.T) {
	a, b, c, g := threeMembers(t)
	loop := func(c *record.Crash) { c.MaxRestarts, c.CrashLoop = 10, 2 }
	for _, m := range []*Member{b, a, c} {
		reportCrash(t, m, crashIn(g, loop))
	}
	g = awaitNewer(t, "a", a.Generations(), g.Number, func(*record.Generation) bool { return true })
	if g.Restarts != 1 || g.FailedStarts != 1 {
		t.Fatalf("after one failed start: %+v, want restarts 1, failed starts 1", g)
	}
	for _, m := range []*Member{c, b, a} {
		reportCrash(t, m, crashIn(g, loop))
	}
	stop := awaitNewer(t, "a", a.Generations(), g.Number, func(*record.Generation) bool { return true })
	want := "every worker exits 1 before its first step, 2 generations in a row: EOFError: Ran out of input, at train.py:31: snapshot = torch.load(path)"
	if stop.Stop == nil || stop.Stop.Message != want || stop.Stop.ExitCode != 1 {
		t.Fatalf("after two failed starts: %+v (stop %+v), want the job stopped: %q", stop, stop.Stop, want)
	}
}

func TestOneTrainerFailingEarlyTimeAfterTimeIsNoCrashLoop(t *testing.T) {
	a, b, _, g := threeMembers(t)
	loop := func(c *record.Crash) { c.MaxRestarts, c.CrashLoop, c.ExitCode, c.Signal = 10, 2, 137, "SIGKILL" }
	reportCrash(t, b, crashIn(g, loop))
	g = awaitNewer(t, "a", a.Generations(), g.Number, func(*record.Generation) bool { return true })
	// The second, in a row: the others do not fail with it, so after the
	// wait for them the job restarts, and the count starts again.
	reportCrash(t, b, crashIn(g, loop))
	g = awaitNewer(t, "a", a.Generations(), g.Number, func(*record.Generation) bool { return true })
	if g.Stop != nil || g.Restarts != 2 || g.FailedStarts != 0 {
		t.Fatalf("after b's second early crash alone: %+v (stop %+v), want restart 2 and the failed starts reset", g, g.Stop)
	}
}

func TestACrashAfterTheFirstStepEndsTheCrashLoop(t *testing.T) {
	a, b, _, g := threeMembers(t)
	loop := func(c *record.Crash) { c.MaxRestarts, c.CrashLoop = 10, 2 }
	reportCrash(t, b, crashIn(g, loop))
	g = awaitNewer(t, "a", a.Generations(), g.Number, func(*record.Generation) bool { return true })
	reportCrash(t, b, crashIn(g, loop, func(c *record.Crash) { c.FirstStep = true }))
	g = awaitNewer(t, "a", a.Generations(), g.Number, func(*record.Generation) bool { return true })
	if g.Stop != nil || g.Restarts != 2 || g.FailedStarts != 0 {
		t.Fatalf("after a crash past the first step: %+v, want restart 2 and the failed starts reset", g)
	}
}

// logLines keeps what a logger wrote, for a test to await a line.
type logLines struct {
	mu      sync.Mutex
	b       bytes.Buffer
	changed chan struct{}
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.Write(p)
	if l.changed != nil {
		close(l.changed)
		l.changed = nil
	}
	return len(p), nil
}

// await waits until a line holding s was written, failing after 15 s.
func (l *logLines) await(t *testing.T, s string) {
	t.Helper()
	timeout := time.After(15 * time.Second)
	for {
		l.mu.Lock()
		found := strings.Contains(l.b.String(), s)
		if l.changed == nil {
			l.changed = make(chan struct{})
		}
		changed := l.changed
		l.mu.Unlock()
		if found {
			return
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("no log line with %q within 15s", s)
		}
	}
}
