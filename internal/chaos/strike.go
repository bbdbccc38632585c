package chaos

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"syscall"
	"time"

	"github.com/ringside/ringside/internal/localjob"
)

// strike plays one event and waits for the survivors to resume (up to the
// deadlock bound); what it undoes (a SIGCONT, etcd back) it undoes after
// the event's hold.
func (h *harness) strike(ctx context.Context, ev Event) (Fault, error) {
	hold := time.Duration(ev.Hold * h.cfg.HoldScale * float64(time.Second))
	switch ev.Kind {
	case ScaleUp:
		if len(h.live) >= h.cfg.Workers+2 {
			ev.Kind = Drain // the job does not grow without bound
			return h.strike(ctx, ev)
		}
		f := Fault{Kind: ScaleUp, At: time.Now()}
		for range min(ev.Count-1, 2) {
			if err := h.add(ctx); err != nil {
				return f, err
			}
		}
		return f, nil
	case EtcdRestart, EtcdFreeze:
		return h.outage(ctx, ev.Kind, hold)
	case Partition:
		return h.partition(ctx, ev, hold)
	}
	victims := h.victims(ev)
	f := Fault{Kind: ev.Kind, At: time.Now()}
	for _, w := range victims {
		f.Targets = append(f.Targets, w.ID)
	}
	switch ev.Kind {
	case KillWorker, KillLeader, KillMany:
		for _, w := range victims {
			h.kill(w, true, true)
		}
	case KillTrainer:
		h.kill(victims[0], false, true)
	case KillSidecar:
		h.kill(victims[0], true, false)
	case Drain:
		w := victims[0]
		delete(h.live, w.ID)
		h.rec.edit(func(hist *History) { hist.Workers[w.ID].Drained = f.At })
		if err := h.job.Drain(w); err != nil {
			return f, err
		}
	case StopWorker, StopLeader:
		w := victims[0]
		h.job.Freeze(w)
		delete(h.live, w.ID)
		h.frozen[w.ID] = w
		h.rec.edit(func(hist *History) {
			l := hist.Workers[w.ID]
			l.Frozen = append(l.Frozen, Interval{From: f.At})
		})
	}
	f.Resumed, _ = h.settle(ctx, f.At)
	// What is left of a victim goes, as its pod would be restarted: an
	// orphan trainer or sidecar, a drained worker that outstays its grace.
	switch ev.Kind {
	case KillTrainer:
		h.kill(victims[0], true, false)
	case KillSidecar:
		h.kill(victims[0], false, true)
	case Drain:
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		tr, sc, err := victims[0].Wait(wctx)
		cancel()
		if err != nil || tr != 0 || sc != 0 {
			fmt.Fprintf(h.progress, "drained %s ended with trainer %d, sidecar %d (%v)\n", victims[0].ID, tr, sc, err)
		}
		h.kill(victims[0], true, true)
	case StopWorker, StopLeader:
		if err := sleep(ctx, time.Until(f.At.Add(hold))); err != nil {
			return f, err
		}
		w := victims[0]
		for _, p := range []interface{ Signal(syscall.Signal) error }{w.Sidecar(), w.Trainer()} {
			p.Signal(syscall.SIGCONT) //nolint:errcheck // a process that is gone needs none
		}
		f.End = time.Now()
		delete(h.frozen, w.ID)
		h.live[w.ID] = w // back: its sidecar registers again and its trainer rejoins
		h.rec.edit(func(hist *History) {
			l := hist.Workers[w.ID]
			l.Frozen[len(l.Frozen)-1].To = f.End
		})
	}
	return f, nil
}

// victims picks the event's workers among the live ones, keeping at least
// the floor alive.
func (h *harness) victims(ev Event) []*localjob.Worker {
	ids := slices.Sorted(maps.Keys(h.live))
	n := 1
	if ev.Kind == KillMany {
		n = max(1, min(ev.Count, len(ids)-h.floor))
	}
	var picked []*localjob.Worker
	if ev.Kind == KillLeader || ev.Kind == StopLeader {
		if w, ok := h.live[h.rec.look(time.Now()).leader]; ok {
			return []*localjob.Worker{w}
		}
	}
	start := int(ev.Pick % uint64(len(ids)))
	for i := range n {
		picked = append(picked, h.live[ids[(start+i)%len(ids)]])
	}
	return picked
}

// kill SIGKILLs the worker's sidecar, trainer or both and records it.
func (h *harness) kill(w *localjob.Worker, sidecar, trainer bool) {
	now := time.Now()
	delete(h.live, w.ID)
	delete(h.frozen, w.ID)
	if sidecar && trainer {
		h.job.Kill(w)
	} else if sidecar {
		w.Sidecar().Kill()
	} else if w.Trainer() != nil {
		w.Trainer().Kill()
	}
	h.rec.edit(func(hist *History) {
		l := hist.Workers[w.ID]
		if sidecar && l.SidecarGone.IsZero() {
			l.SidecarGone = now
		}
		if trainer && l.TrainerGone.IsZero() {
			l.TrainerGone = now
		}
		if n := len(l.Frozen); n > 0 && l.Frozen[n-1].To.IsZero() {
			l.Frozen[n-1].To = now
		}
	})
}

// outage kills or freezes etcd for hold; training is to go on meanwhile.
func (h *harness) outage(ctx context.Context, kind Kind, hold time.Duration) (Fault, error) {
	f := Fault{Kind: kind, Targets: []string{"etcd"}, At: time.Now()}
	if kind == EtcdRestart {
		h.etcd.kill()
	} else if err := h.etcd.freeze(); err != nil {
		return f, err
	}
	h.rec.edit(func(hist *History) { hist.EtcdDown = append(hist.EtcdDown, Interval{From: f.At}) })
	if err := sleep(ctx, hold); err != nil {
		return f, err
	}
	if kind == EtcdRestart {
		if err := h.etcd.restart(ctx); err != nil {
			return f, err
		}
	} else if err := h.etcd.thaw(); err != nil {
		return f, err
	}
	f.End = time.Now()
	h.rec.edit(func(hist *History) { hist.EtcdDown[len(hist.EtcdDown)-1].To = f.End })
	f.Resumed, _ = h.settle(ctx, f.End)
	return f, nil
}

// sleep waits d: a fault's hold is a span of time, not an event to await.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
