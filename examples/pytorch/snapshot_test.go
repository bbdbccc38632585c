package pytorch_test

import (
	"context"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/ringside/ringside/internal/localjob"
)

// The lines snapshot_train.py prints, as the tutorials it follows do.
var (
	epochLine  = regexp.MustCompile(`^\[RANK(\d+)\] Epoch (\d+) \| Batchsize: \d+ \| Steps: \d+ \| World: (\d+)$`)
	resumeLine = regexp.MustCompile(`^\[RANK(\d+)\] Resuming training from snapshot at Epoch (\d+)$`)
	savedLine  = regexp.MustCompile(`^Epoch (\d+) \| Training snapshot saved at `)
)

// TestATutorialScriptSurvivesFaultsUnmodified runs snapshot_train.py, a
// torchrun-style script that saves a snapshot with a plain torch.save
// every epoch and loads it at start, under `ringside exec --preload
// torch` with every other flag at its default: three workers started
// together; rank 0's worker, the one that saves, killed whole and started
// again; another worker's script killed. No fault costs more than the
// epoch in progress, every worker's exec exits 0 after the last epoch, and
// the run forms at most four generations: the start, the kill, the
// rejoin, the script's crash (the workers finishing one by one restart
// nobody).
//
// Run it ten times in a row: go test -count=10 -run TestATutorialScript ./examples/pytorch/
func TestATutorialScriptSurvivesFaultsUnmodified(t *testing.T) {
	requireTorch(t)
	const job, epochs = "tutorial", 150
	dir := logDir(t, "ringside-tutorial-")
	trainer := []string{ringsideBin, "exec", "--preload", "torch", "--",
		python, "-u", "snapshot_train.py", strconv.Itoa(epochs), "1", "--batch_time", "0.01", "--snapshot", filepath.Join(dir, "snapshot.pt")}
	ctx, cancel := context.WithTimeout(context.Background(), 3*importBound+4*resumeBound)
	defer cancel()
	j, err := localjob.Start(ctx, localjob.Config{
		Ringside: ringsideBin, Trainer: trainer, Job: job, Dir: dir,
		SidecarArgs: []string{"--expected-size", "3"},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	for range 3 {
		if _, err := j.AddWorker(ctx); err != nil {
			t.Fatal(err)
		}
	}
	tut := &tutorial{t: t, lines: j.Lines(), saved: -1, rank: map[string]int{}}
	tut.await("the start", importBound+resumeBound, func() bool { return tut.saved >= 1 })

	victim := j.Workers()[tut.workerOf(0)]
	since, saved := time.Now(), tut.catchUp()
	j.Kill(victim)
	tut.resumed("kill -9 of rank 0's worker "+victim.ID, 2, since, saved)

	since = time.Now()
	if _, err := j.AddWorker(ctx); err != nil {
		t.Fatal(err)
	}
	tut.await("the worker started again", importBound+resumeBound, func() bool { return tut.trainedAt(3, since) })

	other := j.Workers()[tut.workerOf(1)]
	since, saved = time.Now(), tut.catchUp()
	if err := j.KillScript(other); err != nil {
		t.Fatal(err)
	}
	tut.resumed("kill -9 of the script of "+other.ID, 3, since, saved)

	for _, w := range j.Workers() {
		select {
		case <-w.Trainer().Done():
			if code := w.Trainer().ExitCode(); code != 0 {
				t.Errorf("%s: exec exited %d after the last epoch; want 0", w.ID, code)
			}
		case <-ctx.Done():
			t.Fatalf("%s: exec did not exit after the last epoch: %v (logs in %s)", w.ID, ctx.Err(), dir)
		}
	}
	tut.catchUp()
	if tut.saved != epochs-1 {
		t.Errorf("the last snapshot saved is of epoch %d; want %d, the last", tut.saved, epochs-1)
	}
	if g, writes := storedGeneration(ctx, t, j, job); writes > 4 {
		t.Errorf("the run formed %d generations (the last %d, %s); want at most 4", writes, g.Number, g.Reason)
	}
}

// tutorial follows snapshot_train.py's lines.
type tutorial struct {
	t     *testing.T
	lines <-chan localjob.Line
	saved int            // the newest epoch saved, -1 before any
	rank  map[string]int // each worker's rank, from its newest epoch line
	// epochs are the epoch lines read, resumes the resume lines.
	epochs, resumes []tutorialLine
}

type tutorialLine struct {
	worker             string
	rank, epoch, world int
	at                 time.Time
}

// await reads lines until done reports true, within bound.
func (tu *tutorial) await(what string, bound time.Duration, done func() bool) {
	tu.t.Helper()
	timeout := time.After(bound)
	for !done() {
		select {
		case l := <-tu.lines:
			tu.read(l)
		case <-timeout:
			tu.t.Fatalf("%s: not done within %s (newest snapshot: epoch %d, ranks %v)", what, bound, tu.saved, tu.rank)
		}
	}
}

// catchUp reads the lines already printed and returns the newest epoch
// saved so far.
func (tu *tutorial) catchUp() int {
	for range len(tu.lines) {
		tu.read(<-tu.lines)
	}
	return tu.saved
}

func (tu *tutorial) read(l localjob.Line) {
	atoi := func(s string) int { n, _ := strconv.Atoi(s); return n }
	if m := epochLine.FindStringSubmatch(l.Text); m != nil {
		tl := tutorialLine{worker: l.Worker, rank: atoi(m[1]), epoch: atoi(m[2]), world: atoi(m[3]), at: l.Time()}
		tu.epochs = append(tu.epochs, tl)
		tu.rank[l.Worker] = tl.rank
	} else if m := resumeLine.FindStringSubmatch(l.Text); m != nil {
		tu.resumes = append(tu.resumes, tutorialLine{worker: l.Worker, rank: atoi(m[1]), epoch: atoi(m[2]), at: l.Time()})
	} else if m := savedLine.FindStringSubmatch(l.Text); m != nil {
		tu.saved = max(tu.saved, atoi(m[1]))
	}
}

// workerOf returns the worker whose newest epoch line was of rank r.
func (tu *tutorial) workerOf(r int) string {
	tu.t.Helper()
	for _, w := range slices.Sorted(maps.Keys(tu.rank)) {
		if tu.rank[w] == r {
			return w
		}
	}
	tu.t.Fatalf("no worker trains as rank %d: %v", r, tu.rank)
	return ""
}

// trainedAt reports whether world workers each began an epoch at world
// size world after since.
func (tu *tutorial) trainedAt(world int, since time.Time) bool {
	seen := map[string]bool{}
	for _, l := range tu.epochs {
		if l.world == world && l.at.After(since) {
			seen[l.worker] = true
		}
	}
	return len(seen) == world
}

// resumed waits until world workers train at world size world after a
// fault at since, and checks that each resumed from a snapshot no older
// than the newest one saved before the fault: a fault costs at most the
// epoch in progress.
func (tu *tutorial) resumed(what string, world int, since time.Time, saved int) {
	tu.t.Helper()
	tu.await(what, resumeBound+importBound, func() bool { return tu.trainedAt(world, since) })
	resumed := map[string]int{}
	for _, l := range tu.resumes {
		if l.at.After(since) {
			resumed[l.worker] = l.epoch
		}
	}
	if len(resumed) != world {
		tu.t.Fatalf("%s: %d workers resumed from the snapshot (%v); want %d", what, len(resumed), resumed, world)
	}
	for w, e := range resumed {
		if e < saved+1 {
			tu.t.Errorf("%s: %s resumed at epoch %d, but epoch %d was saved before the fault: epochs lost", what, w, e, saved)
		}
	}
	tu.t.Logf("%s: %d workers resumed at epoch %v, the snapshot of epoch %d saved before it", what, world, slices.Sorted(maps.Values(resumed)), saved)
}
