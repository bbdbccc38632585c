package sidecar

import (
	"context"
	"time"

	"github.com/ringside/ringside/sidecar/quantile"
)

// heartbeats keeps the newest heartbeat and a window of step times.
type heartbeats struct {
	last    Heartbeat
	at      time.Time
	dirty   bool
	times   []float64 // ring buffer of recent step times
	next    int
	prev    Heartbeat
	prevAt  time.Time
	samples float64 // samples per second between the last two flushes
}

const stepWindow = 64

// Status is what a member stores under status/<id> for the autoscaler and
// straggler checks.
type Status struct {
	Step          int64     `json:"step"`
	Samples       int64     `json:"samples"`
	SamplesPerSec float64   `json:"samples_per_s"`
	StepTimeS     float64   `json:"step_time_s"`
	StepTimeP50S  float64   `json:"step_time_p50_s"`
	StepTimeP90S  float64   `json:"step_time_p90_s"`
	Generation    int64     `json:"generation"`
	Time          time.Time `json:"time"`
}

func (a *Agent) recordHeartbeat(hb Heartbeat) {
	a.mu.Lock()
	defer a.mu.Unlock()
	b := &a.beats
	b.last, b.at, b.dirty = hb, time.Now(), true
	if len(b.times) < stepWindow {
		b.times = append(b.times, hb.StepTimeS)
	} else {
		b.times[b.next] = hb.StepTimeS
		b.next = (b.next + 1) % stepWindow
	}
}

// status builds the status to store, or reports false if nothing is new.
func (a *Agent) status() (Status, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	b := &a.beats
	if !b.dirty {
		return Status{}, false
	}
	b.dirty = false
	if !b.prevAt.IsZero() && b.at.After(b.prevAt) && b.last.Samples >= b.prev.Samples {
		b.samples = float64(b.last.Samples-b.prev.Samples) / b.at.Sub(b.prevAt).Seconds()
	}
	b.prev, b.prevAt = b.last, b.at
	gen := b.last.Generation
	if gen == 0 && a.gen != nil {
		gen = a.gen.Number
	}
	return Status{
		Step: b.last.Step, Samples: b.last.Samples, SamplesPerSec: b.samples,
		StepTimeS: b.last.StepTimeS, StepTimeP50S: quantile.Of(b.times, 0.5), StepTimeP90S: quantile.Of(b.times, 0.9),
		Generation: gen, Time: b.at,
	}, true
}

// flushHeartbeats writes the newest heartbeat to etcd at most once per
// StatusInterval.
func (a *Agent) flushHeartbeats(ctx context.Context) {
	t := time.NewTicker(a.cfg.StatusInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		st, ok := a.status()
		if !ok {
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, a.cfg.StatusInterval)
		if err := a.member.PutStatus(pctx, st); err != nil {
			a.log.Debug("status not stored", "err", err)
		}
		cancel()
	}
}
