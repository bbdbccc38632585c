package localjob

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"time"
)

// Tracker follows the trainers' step lines. It is not safe for
// concurrent use: one goroutine reads the job's lines through it.
type Tracker struct {
	job  *Job
	last map[string]Line
	rate map[string]float64 // steps per second, smoothed
	// tick, if set, is called every tickEvery while AllStepAt waits.
	tick      func()
	tickEvery time.Duration
	// firstAt is, per worker, the first step line of the last AllStepAt.
	firstAt map[string]Line
}

// NewTracker follows job's lines.
func NewTracker(job *Job) *Tracker {
	return &Tracker{job: job, last: map[string]Line{}, rate: map[string]float64{}, firstAt: map[string]Line{}}
}

// Every makes AllStepAt call f every d while it waits (a live view).
func (w *Tracker) Every(d time.Duration, f func()) { w.tick, w.tickEvery = f, d }

// Rate returns worker id's recent steps per second.
func (w *Tracker) Rate(id string) float64 { return w.rate[id] }

// LastOf returns worker id's newest step line.
func (w *Tracker) LastOf(id string) Line { return w.last[id] }

// First returns, per worker, its first step line of the last AllStepAt.
func (w *Tracker) First() map[string]Line { return w.firstAt }

// AllStepAt waits until every live worker completed a step at world size
// world after since, and returns when the last of them did.
func (w *Tracker) AllStepAt(ctx context.Context, world int, since time.Time) (time.Time, error) {
	w.firstAt = map[string]Line{}
	var tick <-chan time.Time
	if w.tick != nil {
		t := time.NewTicker(w.tickEvery)
		defer t.Stop()
		tick = t.C
	}
	for {
		live := w.job.Workers()
		n := 0
		var latest time.Time
		for id := range live {
			if l, ok := w.firstAt[id]; ok {
				n++
				if l.Time().After(latest) {
					latest = l.Time()
				}
			}
		}
		if n == len(live) && n == world {
			return latest, nil
		}
		select {
		case l := <-w.job.Lines():
			if l.Event != "" {
				continue
			}
			if !l.SumOK {
				return time.Time{}, fmt.Errorf("%s computed a wrong sum at step %d", l.Worker, l.Step)
			}
			if prev, ok := w.last[l.Worker]; ok && l.T > prev.T {
				w.rate[l.Worker] = 0.8*w.rate[l.Worker] + 0.2/(l.T-prev.T)
			}
			w.last[l.Worker] = l
			if _, seen := w.firstAt[l.Worker]; !seen && l.World == world && l.Time().After(since) {
				w.firstAt[l.Worker] = l
			}
		case <-tick:
			w.tick()
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("%d of %d workers stepped at world size %d: %w", n, len(live), world, ctx.Err())
		}
	}
}

// ByRank returns the live worker whose trainer last reported rank r.
func (w *Tracker) ByRank(r int) *Worker {
	live := w.job.Workers()
	ids := make([]string, 0, len(live))
	for id := range live {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if w.last[id].Rank == r {
			return live[id]
		}
	}
	return nil
}

// Last returns every worker's newest step line.
func (w *Tracker) Last() map[string]Line {
	out := make(map[string]Line, len(w.last))
	for k, v := range w.last {
		out[k] = v
	}
	return out
}

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
