package localjob

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"
)

// Tracker follows the trainers' step lines: each worker's newest line and
// step rate, the world size each step completed at, and when each
// generation first stepped. It reads the job's lines only while one of its
// waits runs (AllStepAt, Until, FirstStepAbove), in the caller's goroutine,
// so it starts no goroutine and is not safe for concurrent use; lines that
// come in between wait in the job's buffer. Wait with Until rather than
// sleeping, so that trainers never block on a full buffer.
type Tracker struct {
	job  *Job
	last map[string]Line
	rate map[string]float64 // steps per second, smoothed
	// world is, per step, the world size it last completed at.
	world map[int64]int
	// genAt is, per generation, when its first step completed.
	genAt    map[int64]time.Time
	top, gen int64
	// tick, if set, is called every tickEvery while a wait runs.
	tick      func()
	tickEvery time.Duration
	// firstAt is, per worker, the first step line of the last AllStepAt.
	firstAt map[string]Line
	// observe, if set, is handed every step line recorded.
	observe func(Line)
}

// NewTracker follows job's lines.
func NewTracker(job *Job) *Tracker {
	return &Tracker{job: job, last: map[string]Line{}, rate: map[string]float64{}, world: map[int64]int{},
		genAt: map[int64]time.Time{}, firstAt: map[string]Line{}}
}

// Every makes the waits call f every d (a live view).
func (w *Tracker) Every(d time.Duration, f func()) { w.tick, w.tickEvery = f, d }

// Observe hands f every step line from now on, as it is recorded (a
// checker that must see each one).
func (w *Tracker) Observe(f func(Line)) { w.observe = f }

// Rate returns worker id's recent steps per second.
func (w *Tracker) Rate(id string) float64 { return w.rate[id] }

// LastOf returns worker id's newest step line.
func (w *Tracker) LastOf(id string) Line { return w.last[id] }

// First returns, per worker, its first step line of the last AllStepAt.
func (w *Tracker) First() map[string]Line { return w.firstAt }

// Top is the job's step counter: the highest step any rank completed.
func (w *Tracker) Top() int64 { return w.top }

// Generation is the newest generation any rank stepped in.
func (w *Tracker) Generation() int64 { return w.gen }

// Samples sums the world sizes of steps (from, to]: a step at world size n
// trained on n ranks' batches.
func (w *Tracker) Samples(from, to int64) int64 {
	var n int64
	for s := from + 1; s <= to; s++ {
		n += int64(w.world[s])
	}
	return n
}

// AllStepAt waits until every live worker completed a step at world size
// world after since, and returns when the last of them did.
func (w *Tracker) AllStepAt(ctx context.Context, world int, since time.Time) (time.Time, error) {
	return w.AllStepAbove(ctx, world, -1, since)
}

// AllStepAbove is AllStepAt counting only steps in a generation above gen:
// a job that restarts every process at the same world size (restart mode)
// trains again once each worker stepped in the new generation.
func (w *Tracker) AllStepAbove(ctx context.Context, world int, gen int64, since time.Time) (time.Time, error) {
	w.firstAt = map[string]Line{}
	var latest time.Time
	n, live := 0, 0
	everyone := func() bool {
		workers := w.job.Workers()
		n, live, latest = 0, len(workers), time.Time{}
		for id := range workers {
			if l, ok := w.firstAt[id]; ok {
				n++
				if l.Time().After(latest) {
					latest = l.Time()
				}
			}
		}
		return n == live && n == world
	}
	first := func(l Line) {
		if _, seen := w.firstAt[l.Worker]; !seen && l.World == world && l.Generation > gen && l.Time().After(since) {
			w.firstAt[l.Worker] = l
		}
	}
	if _, err := w.follow(ctx, time.Time{}, first, everyone); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%d of %d workers stepped at world size %d: %w", n, live, world, err)
		}
		return time.Time{}, err
	}
	return latest, nil
}

// Until follows the lines until t; it returns early only with ctx's error
// or a wrong sum.
func (w *Tracker) Until(ctx context.Context, t time.Time) error {
	_, err := w.follow(ctx, t, nil, func() bool { return false })
	return err
}

// Await follows the lines until done reports true (asked first and after
// every line), ctx ends or deadline passes (zero: none); it reports
// whether done did.
func (w *Tracker) Await(ctx context.Context, deadline time.Time, done func() bool) (bool, error) {
	return w.follow(ctx, deadline, nil, done)
}

// FirstStepAbove waits until a rank completed a step in a generation above
// gen and returns when the first such step was; past deadline it returns
// false.
func (w *Tracker) FirstStepAbove(ctx context.Context, gen int64, deadline time.Time) (time.Time, bool, error) {
	var first time.Time
	found := func() bool {
		for g, t := range w.genAt {
			if g > gen && (first.IsZero() || t.Before(first)) {
				first = t
			}
		}
		return !first.IsZero()
	}
	ok, err := w.follow(ctx, deadline, nil, found)
	return first, ok, err
}

// follow records lines, handing each step line to each (when set), until
// done reports true (it is asked first and after every line), ctx ends or
// deadline passes (zero: none). It reports whether done did.
func (w *Tracker) follow(ctx context.Context, deadline time.Time, each func(Line), done func() bool) (bool, error) {
	var tick, timeout <-chan time.Time
	if w.tick != nil {
		t := time.NewTicker(w.tickEvery)
		defer t.Stop()
		tick = t.C
	}
	if !deadline.IsZero() {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		timeout = t.C
	}
	for !done() {
		select {
		case l := <-w.job.Lines():
			if err := w.record(l); err != nil {
				return false, err
			}
			if each != nil && l.Event == "" && l.Text == "" {
				each(l)
			}
		case <-tick:
			w.tick()
		case <-timeout:
			return false, w.catchUp()
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	return true, nil
}

// catchUp records the lines already waiting, so that what the tracker
// tells after a wait holds as of the wait's end.
func (w *Tracker) catchUp() error {
	for range len(w.job.Lines()) {
		if err := w.record(<-w.job.Lines()); err != nil {
			return err
		}
	}
	return nil
}

// record takes in one line; a step with a wrong sum is an error.
func (w *Tracker) record(l Line) error {
	if l.Event != "" || l.Text != "" {
		return nil
	}
	if !l.SumOK {
		return fmt.Errorf("%s computed a wrong sum at step %d", l.Worker, l.Step)
	}
	if prev, ok := w.last[l.Worker]; ok && l.T > prev.T {
		w.rate[l.Worker] = 0.8*w.rate[l.Worker] + 0.2/(l.T-prev.T)
	}
	if w.observe != nil {
		w.observe(l)
	}
	w.last[l.Worker] = l
	w.world[l.Step] = l.World
	if t, ok := w.genAt[l.Generation]; !ok || l.Time().Before(t) {
		w.genAt[l.Generation] = l.Time()
	}
	w.top, w.gen = max(w.top, l.Step), max(w.gen, l.Generation)
	return nil
}

// ByRank returns the live worker whose trainer last reported rank r, nil
// when none did.
func (w *Tracker) ByRank(r int) *Worker {
	live := w.job.Workers()
	for _, id := range slices.Sorted(maps.Keys(live)) {
		if l, ok := w.last[id]; ok && l.Rank == r {
			return live[id]
		}
	}
	return nil
}

// Last returns every worker's newest step line.
func (w *Tracker) Last() map[string]Line { return maps.Clone(w.last) }

// FindTrainer locates the ring trainer binary: bin if set, else
// ringtrainer next to this executable, else in PATH.
func FindTrainer(bin string) (string, error) {
	if bin != "" {
		return bin, nil
	}
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), "ringtrainer")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath("ringtrainer"); err == nil {
		return p, nil
	}
	return "", errors.New("ringtrainer not found next to ringside or in PATH: run `make build` (it builds bin/ringtrainer) or pass --trainer-bin")
}
