package sidecar

import (
	"context"
	"time"

	"github.com/ringside/ringside/coordinator/record"
	"github.com/ringside/ringside/sidecar/quantile"
	"github.com/ringside/ringside/trainer/api"
)

// heartbeats keeps the newest heartbeat and a window of step times.
type heartbeats struct {
	last    api.Heartbeat
	at      time.Time
	dirty   bool
	times   []float64 // ring buffer of recent step times
	next    int
	prev    api.Heartbeat
	prevAt  time.Time
	samples float64 // samples per second between the last two flushes
	// gns is the newest gradient noise scale reported: kept across
	// heartbeats without one (a trainer may measure it every few steps).
	gns *float64
	// detached is true while the trainer is not attached (followTrainer
	// says so): a flush of a heartbeat it sent before it went leaves the
	// throughput gauge at 0.
	detached bool
	// computes and waits are the compute and wait times of the
	// heartbeats since the last flush that carried them (the newest
	// stepWindow), for the status's medians.
	computes, waits []float64
}

const stepWindow = 64

func (a *Agent) recordHeartbeat(hb api.Heartbeat) {
	a.presence.heartbeat()
	a.mu.Lock()
	defer a.mu.Unlock()
	b := &a.beats
	// skipped_steps is counted per trainer process: a lower count than the
	// last is a new process, counted from 0.
	if prev := b.last.SkippedSteps; hb.SkippedSteps >= prev {
		a.metrics.trainerSkipped.Add(float64(hb.SkippedSteps - prev))
	} else {
		a.metrics.trainerSkipped.Add(float64(hb.SkippedSteps))
	}
	a.metrics.trainerStep.Set(float64(hb.Step))
	a.metrics.trainerStepTime.Set(hb.StepTimeS)
	if hb.Generation > 0 {
		a.metrics.trainerGen.Set(float64(hb.Generation))
	}
	b.last, b.at, b.dirty = hb, time.Now(), true
	if hb.GNS != nil {
		v := *hb.GNS
		b.gns = &v
	}
	if hb.ComputeTimeS > 0 || hb.WaitTimeS > 0 {
		if len(b.computes) == stepWindow {
			b.computes, b.waits = b.computes[1:], b.waits[1:]
		}
		b.computes = append(b.computes, hb.ComputeTimeS)
		b.waits = append(b.waits, hb.WaitTimeS)
	}
	select {
	case a.beatCh <- struct{}{}:
	default: // a flush is due already
	}
	if len(b.times) < stepWindow {
		b.times = append(b.times, hb.StepTimeS)
	} else {
		b.times[b.next] = hb.StepTimeS
		b.next = (b.next + 1) % stepWindow
	}
	if limit, ok := stallLimit(b.times); ok {
		select {
		case <-a.stepped: // replaced by the newer limit
		default:
		}
		a.stepped <- limit
	}
}

// steppedSince reports whether the trainer sent a heartbeat (a step)
// after t.
func (a *Agent) steppedSince(t time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.beats.at.After(t)
}

// status builds the status to store, or reports false if nothing is new.
func (a *Agent) status() (record.Status, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	b := &a.beats
	if !b.dirty {
		return record.Status{}, false
	}
	b.dirty = false
	if !b.prevAt.IsZero() && b.at.After(b.prevAt) && b.last.Samples >= b.prev.Samples {
		b.samples = float64(b.last.Samples-b.prev.Samples) / b.at.Sub(b.prevAt).Seconds()
	}
	b.prev, b.prevAt = b.last, b.at
	if !b.detached {
		a.metrics.trainerSamples.Set(b.samples)
	}
	gen := b.last.Generation
	if gen == 0 && a.gen != nil {
		gen = a.gen.Number
	}
	p := quantile.Each(b.times, 0.5, 0.9)
	st := record.Status{
		Step: b.last.Step, Samples: b.last.Samples, SamplesPerSec: b.samples,
		StepTimeS: b.last.StepTimeS, StepTimeP50S: p[0], StepTimeP90S: p[1],
		Generation: gen, Time: b.at, GNS: b.gns,
	}
	if len(b.computes) > 0 {
		// Medians: a step that stalled (a garbage collection, the machine
		// busy) does not speak for the others.
		st.ComputeTimeS, st.WaitTimeS = quantile.Of(b.computes, 0.5), quantile.Of(b.waits, 0.5)
		b.computes, b.waits = b.computes[:0], b.waits[:0]
	}
	return st, true
}

// trainerPresent records whether the trainer is attached. A detached
// trainer trains nothing: its throughput gauge reads 0 until a heartbeat
// after its return is flushed.
func (a *Agent) trainerPresent(attached bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.beats.detached = !attached
	if !attached {
		a.metrics.trainerSamples.Set(0)
	}
}

// flushHeartbeats writes the newest heartbeat to etcd at most once per
// StatusInterval. It sleeps while no heartbeat comes: an idle sidecar
// wakes for nothing.
func (a *Agent) flushHeartbeats(ctx context.Context) {
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.beatCh:
		}
		if wait := a.cfg.StatusInterval - time.Since(last); wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
		st, ok := a.status()
		if !ok {
			continue
		}
		last = time.Now()
		pctx, cancel := context.WithTimeout(ctx, a.cfg.StatusInterval)
		if err := a.member.PutStatus(pctx, st); err != nil {
			a.log.Debug("status not stored", "err", err)
		}
		cancel()
	}
}
