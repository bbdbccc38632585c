package localjob

import (
	"context"
	"strings"
	"testing"
	"time"
)

// fakeJob is a job without processes: the lines are queued by the test.
func fakeJob(ids ...string) *Job {
	j := &Job{lines: make(chan Line, 64), workers: map[string]*Worker{}}
	for _, id := range ids {
		j.workers[id] = &Worker{ID: id}
	}
	return j
}

func line(worker string, step, gen int64, world int, at time.Time) Line {
	return Line{Worker: worker, Step: step, Generation: gen, World: world, SumOK: true,
		T: float64(at.UnixMicro()) / 1e6}
}

func queue(j *Job, lines ...Line) {
	for _, l := range lines {
		j.lines <- l
	}
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestTrackerCountsEachStepOnceAtItsLastWorld(t *testing.T) {
	j := fakeJob("w0", "w1")
	t0 := time.Now()
	queue(j,
		line("w0", 1, 1, 4, t0), line("w1", 1, 1, 4, t0),
		line("w0", 2, 1, 4, t0), // w1 never finished step 2 at world 4
		line("w1", 2, 2, 3, t0), // redone at world 3 after a fault
		line("w1", 3, 2, 3, t0),
		Line{Worker: "w1", Event: "ring", Generation: 3}, // not a step
	)
	tr := NewTracker(j)
	// A deadline already past still takes in every line waiting.
	if err := tr.Until(testContext(t), t0); err != nil {
		t.Fatal(err)
	}
	if got := tr.Top(); got != 3 {
		t.Errorf("Top = %d, want 3", got)
	}
	if got := tr.Samples(0, 3); got != 4+3+3 {
		t.Errorf("Samples(0, 3) = %d, want 10 (a redone step counts once, at the world it last ran at)", got)
	}
	if got := tr.Generation(); got != 2 {
		t.Errorf("Generation = %d, want 2", got)
	}
	if got := tr.LastOf("w1").Step; got != 3 {
		t.Errorf("w1's last step = %d, want 3", got)
	}
}

func TestTrackerTimesTheFirstStepOfTheNextGeneration(t *testing.T) {
	j := fakeJob("w0")
	t0 := time.Now()
	queue(j,
		line("w0", 5, 1, 4, t0),
		line("w0", 6, 1, 4, t0.Add(10*time.Millisecond)), // in flight at the fault: not a resume
		line("w0", 6, 2, 3, t0.Add(200*time.Millisecond)),
	)
	first, ok, err := NewTracker(j).FirstStepAbove(testContext(t), 1, t0.Add(time.Minute))
	if err != nil || !ok {
		t.Fatalf("FirstStepAbove = %v, %v, %v; want the first step of generation 2", first, ok, err)
	}
	if d := first.Sub(t0) - 200*time.Millisecond; d < -time.Millisecond || d > time.Millisecond {
		t.Errorf("first step above generation 1 at %s after the fault, want 200ms", first.Sub(t0))
	}
}

func TestTrackerFirstStepAboveEndsAtTheDeadline(t *testing.T) {
	j := fakeJob("w0")
	t0 := time.Now()
	queue(j, line("w0", 5, 1, 4, t0))
	_, ok, err := NewTracker(j).FirstStepAbove(testContext(t), 1, t0.Add(50*time.Millisecond))
	if err != nil || ok {
		t.Fatalf("FirstStepAbove = %v, %v; want no step before the deadline and no error", ok, err)
	}
}

func TestTrackerAllStepAtWaitsForEveryLiveWorker(t *testing.T) {
	j := fakeJob("w0", "w1")
	since := time.Now()
	queue(j,
		line("w0", 1, 1, 2, since.Add(-time.Second)),        // before since
		line("w0", 2, 1, 1, since.Add(10*time.Millisecond)), // the wrong world
		line("w0", 3, 2, 2, since.Add(20*time.Millisecond)),
		line("w0", 4, 2, 2, since.Add(30*time.Millisecond)),
		line("w1", 3, 2, 2, since.Add(40*time.Millisecond)),
	)
	tr := NewTracker(j)
	done, err := tr.AllStepAt(testContext(t), 2, since)
	if err != nil {
		t.Fatal(err)
	}
	if d := done.Sub(since) - 40*time.Millisecond; d < -time.Millisecond || d > time.Millisecond {
		t.Errorf("AllStepAt returned %s after since, want 40ms: when w1, the last, stepped", done.Sub(since))
	}
	if got := tr.First()["w0"].Step; got != 3 {
		t.Errorf("w0's first step at world 2 = %d, want 3", got)
	}
	if w := tr.ByRank(0); w == nil {
		t.Error("ByRank(0) = nil, want a worker")
	}
}

func TestTrackerByRankSkipsWorkersWithoutALine(t *testing.T) {
	if w := NewTracker(fakeJob("w0")).ByRank(0); w != nil {
		t.Errorf("ByRank(0) = %s, want nil: w0 never reported a rank", w.ID)
	}
}

func TestTrackerFailsOnAWrongSum(t *testing.T) {
	j := fakeJob("w0")
	bad := line("w0", 7, 1, 1, time.Now())
	bad.SumOK = false
	queue(j, bad)
	_, err := NewTracker(j).AllStepAt(testContext(t), 1, time.Time{})
	if err == nil || !strings.Contains(err.Error(), "wrong sum at step 7") {
		t.Fatalf("AllStepAt = %v, want the wrong sum", err)
	}
}
