package sidecar

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/ringside/ringside/coordinator/record"
)

// The trainer's liveness is part of the membership. A trainer that dies
// while its sidecar lives (an OOM kill or a CUDA error ends the training
// container, the sidecar container lives on) would otherwise hold a place
// in the ring that nobody trains in: the survivors form groups with a rank
// that never comes. So the member leaves the ring (it turns pending, and
// the leader commits the generation without it at once, as for any
// failure) when its trainer goes, and enters it again (it turns active,
// and joins with the settle window) when the trainer comes back, as the
// kubelet restarts the container and the new trainer asks for a
// rendezvous or opens the event stream.
//
// How the sidecar knows its trainer is there:
//
//   - An open event stream (GET /v1/events) is the trainer: every ringside
//     client keeps one open for its whole life (the Python watcher, Go
//     trainers, `ringside exec`, which restarts its command itself and
//     holds the stream while it does). When the trainer's side closes the
//     last stream, its process has ended (the kernel closes its sockets on
//     any death) and it is gone at once: no timeout stands between a crash
//     and the survivors' next generation. A stream the sidecar itself ends
//     (a subscriber too slow, see broadcaster) is not a death: the trainer
//     reconnects, and has TrainerTimeout to.
//   - A trainer that never streams is watched by its heartbeats (POST
//     /v1/heartbeat): it is gone TrainerTimeout after its last one, or after
//     the last rendezvous answered to it. One that neither streams nor
//     heartbeats (a launcher that only polls the rendezvous, as Horovod's
//     host discovery does) gives nothing to watch and is never taken for
//     gone.
//   - A rendezvous long poll in progress is the trainer too (a standby
//     trainer waits in one), but one the trainer hangs up tells nothing:
//     clients give up polls for their own reasons.
//   - Before its first attach a trainer is starting (importing torch,
//     loading data): with AwaitTrainer the member is pending until then
//     anyway; without it, the member is left active, and taken out only
//     once TrainerStartGrace (when set) passes without an attach.
//
// With several slots, each slot's process is a trainer of its own: a
// stream or poll that names its slot (?local_rank=K, as the Python client
// sends it) stands for that process only, and once any has, the member is
// attached only while every slot 0..Slots-1 holds one. A member whose one
// slot process died leaves the ring at once (the survivors could not form
// a group with its rank) and enters it again once the process is back:
// `ringside exec --live` restarts it alone. While not every slot has
// attached yet (a member starting, one slot still importing torch), the
// timeout rules below apply as for one trainer. A stream or poll that
// names no slot (`ringside exec` in restart mode, which holds one while it
// restarts its command, Go trainers) is the whole pod's trainer: any one
// keeps the member attached, as with one slot. Once a drain has begun,
// the drain alone decides the member's state.

// presence tracks whether the pod's trainer is attached to the API. The
// API handlers report to it; followTrainer acts on it.
type presence struct {
	timeout time.Duration
	slots   int // the member's slots: the processes a slotted trainer has

	mu sync.Mutex
	// streams and polls count the event streams open and the rendezvous
	// long polls in progress, by slot (noSlot: naming none).
	streams, polls map[int]int
	// slotted: a stream or poll named its slot, so every slot must be
	// there. gone: slots whose trainer closed its last stream, until one
	// opens again.
	slotted bool
	gone    map[int]bool
	// watched: the trainer streamed events or sent a heartbeat, so its end
	// can be seen.
	watched bool
	seen    bool // attached at least once
	// deadline: with no stream or poll open, a watched trainer is gone
	// from then on.
	deadline time.Time
	why      string // why the deadline was set, for the log
	// restartMode: a stream said its trainer runs in restart mode
	// (?mode=restart, `ringside exec`); a pod's trainer keeps its mode.
	restartMode bool

	kick chan struct{} // wakes followTrainer; buffered, never blocks
}

// noSlot keys the streams and polls that name no slot.
const noSlot = -1

func newPresence(timeout time.Duration, slots int) *presence {
	return &presence{timeout: timeout, slots: slots, streams: map[int]int{}, polls: map[int]int{},
		gone: map[int]bool{}, kick: make(chan struct{}, 1)}
}

// trainerSlot reads the slot a stream or poll names (?local_rank=K);
// noSlot when it names none, or one outside the member's slots (that
// trainer's own check of its LOCAL_RANK tells the user what is wrong).
func (p *presence) trainerSlot(r *http.Request) (int, error) {
	s := r.URL.Query().Get("local_rank")
	if s == "" {
		return noSlot, nil
	}
	k, err := strconv.Atoi(s)
	if err != nil || k < 0 {
		return 0, fmt.Errorf("local_rank=%q: want this process's slot, an integer >= 0", s)
	}
	if k >= p.slots {
		return noSlot, nil
	}
	return k, nil
}

// change applies f under the lock and wakes followTrainer.
func (p *presence) change(f func(now time.Time)) {
	p.mu.Lock()
	f(time.Now())
	p.mu.Unlock()
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// extend moves the deadline to timeout from now, never earlier.
func (p *presence) extend(now time.Time, why string) {
	if d := now.Add(p.timeout); d.After(p.deadline) {
		p.deadline, p.why = d, why
	}
}

// restarting records that the trainer runs in restart mode. A stream
// says so before it opens, so the member's join is batched for restart
// mode from the start.
func (p *presence) restarting() {
	p.change(func(time.Time) { p.restartMode = true })
}

func (p *presence) inRestartMode() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.restartMode
}

func (p *presence) streamOpened(slot int) {
	p.change(func(time.Time) {
		p.streams[slot]++
		p.watched, p.seen = true, true
		p.slotted = p.slotted || slot != noSlot
		delete(p.gone, slot)
	})
}

// streamClosed records the end of an event stream of slot; byTrainer: the
// trainer's side closed it (not the sidecar).
func (p *presence) streamClosed(slot int, byTrainer bool) {
	p.change(func(now time.Time) {
		p.streams[slot]--
		if byTrainer {
			p.deadline, p.why = now, "its event stream closed"
			if slot != noSlot && p.streams[slot] == 0 {
				p.gone[slot] = true
			}
			return
		}
		p.extend(now, "its event stream, ended by the sidecar, was not opened again")
	})
}

func (p *presence) pollStarted(slot int) {
	p.change(func(time.Time) {
		p.polls[slot]++
		p.seen = true
		p.slotted = p.slotted || slot != noSlot
	})
}

// pollEnded records the end of a long poll of slot; answered: the trainer
// got its answer (a generation, or no content when its timeout ran out).
func (p *presence) pollEnded(slot int, answered bool) {
	p.change(func(now time.Time) {
		p.polls[slot]--
		if answered {
			p.extend(now, "no heartbeat since its last rendezvous")
		}
	})
}

func (p *presence) heartbeat() {
	p.change(func(now time.Time) {
		p.watched, p.seen = true, true
		p.deadline, p.why = now.Add(p.timeout), "its heartbeats stopped"
	})
}

// attached reports whether the trainer is attached at now. seen is false
// while it never was; else, when attached, recheck is when it will not be
// unless it is heard from (zero: no such time), and why says what it
// missed when it is not.
func (p *presence) attached(now time.Time) (attached, seen bool, recheck time.Time, why string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case !p.seen:
		return false, false, time.Time{}, ""
	case p.there(noSlot) || !p.watched:
		return true, true, time.Time{}, ""
	case p.slotted:
		all := true
		for k := range p.slots {
			if !p.there(k) && p.gone[k] {
				// A heartbeat of another slot does not stand for this one.
				return false, true, time.Time{}, fmt.Sprintf("local rank %d's event stream closed", k)
			}
			all = all && p.there(k)
		}
		if all {
			return true, true, time.Time{}, ""
		}
	}
	if now.Before(p.deadline) {
		return true, true, p.deadline, ""
	}
	if p.slotted && p.why == "" {
		return false, true, time.Time{}, "not every slot's process attached"
	}
	return false, true, time.Time{}, p.why
}

// there reports whether slot holds a stream or a poll open.
func (p *presence) there(slot int) bool { return p.streams[slot] > 0 || p.polls[slot] > 0 }

// trainerState is the registration state a trainer's presence asks for at
// now (the member started at started), and when that changes by itself,
// at the end of the start grace (zero: it does not).
func (a *Agent) trainerState(attached, seen bool, now, started time.Time) (s record.State, recheck time.Time) {
	switch {
	case attached:
		return record.StateActive, time.Time{}
	case seen, a.cfg.AwaitTrainer:
		return record.StatePending, time.Time{}
	case a.cfg.TrainerStartGrace <= 0:
		return record.StateActive, time.Time{}
	}
	if end := started.Add(a.cfg.TrainerStartGrace); now.Before(end) {
		return record.StateActive, end
	}
	return record.StatePending, time.Time{}
}

// trainerRetry is how soon a state change that etcd did not take is tried
// again; applyTimeout bounds one try, so a drain never waits long for it.
const (
	trainerRetry = 200 * time.Millisecond
	applyTimeout = 5 * time.Second
)

// followTrainer keeps the member's registration state in line with its
// trainer's presence until ctx ends: active while the trainer is attached,
// pending while it is gone. It writes only changes: a member whose trainer
// stays attached writes nothing.
func (a *Agent) followTrainer(ctx context.Context) {
	started := time.Now()
	applied := a.initialState()
	restartPublished := false
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := time.Now()
		attached, seen, recheck, why := a.presence.attached(now)
		want, graceEnd := a.trainerState(attached, seen, now, started)
		switch {
		case attached:
			why = "trainer attached"
		case seen:
			why = "trainer gone: " + why
		case want == record.StatePending && !a.cfg.AwaitTrainer:
			why = "trainer did not attach within the start grace of " + a.cfg.TrainerStartGrace.String()
		}
		if recheck.IsZero() {
			recheck = graceEnd
		}
		// Before the member enters the ring: its join is then batched as
		// restart mode's.
		if !restartPublished && a.presence.inRestartMode() {
			if restartPublished = a.publishRestartMode(ctx); !restartPublished && ctx.Err() == nil {
				recheck = time.Now().Add(trainerRetry)
			}
		}
		if want != applied {
			if a.applyTrainerState(ctx, want, why) {
				applied = want
			} else if ctx.Err() == nil {
				recheck = time.Now().Add(trainerRetry)
			}
		}
		a.metrics.trainerAttached.Set(boolFloat(attached))
		a.trainerPresent(attached)
		timer.Stop()
		if !recheck.IsZero() {
			timer.Reset(time.Until(recheck))
		}
		select {
		case <-ctx.Done():
			return
		case <-a.presence.kick:
		case <-timer.C:
		}
	}
}

// applyTrainerState stores s (active or pending) unless a drain has begun;
// it reports whether there is nothing left to do.
func (a *Agent) applyTrainerState(ctx context.Context, s record.State, why string) bool {
	a.stateMu.Lock()
	defer a.stateMu.Unlock()
	if a.leaving.Load() {
		return true // the drain owns the state now
	}
	actx, cancel := context.WithTimeout(ctx, applyTimeout)
	defer cancel()
	start := time.Now()
	var err error
	if s == record.StateActive {
		// Activate turns only a pending member active: a member the
		// drain marked draining meanwhile stays draining.
		err = a.member.Activate(actx)
	} else {
		err = a.member.SetState(actx, s)
	}
	if err != nil {
		a.log.Warn("could not follow the trainer's presence; trying again", "state", s, "why", why, "err", err)
		return false
	}
	if s == record.StateActive {
		a.log.Info("trainer attached; member enters the ring", "why", why, "took", time.Since(start))
	} else {
		a.log.Warn("member leaves the ring until its trainer comes back", "why", why, "took", time.Since(start))
	}
	return true
}

// publishRestartMode stores that the trainer runs in restart mode, for the
// leader's settle window (coordinator.Config.RestartSettle); it reports
// whether it is stored.
func (a *Agent) publishRestartMode(ctx context.Context) bool {
	actx, cancel := context.WithTimeout(ctx, applyTimeout)
	defer cancel()
	if err := a.member.SetRestartMode(actx); err != nil {
		a.log.Warn("could not publish that the trainer runs in restart mode; trying again", "err", err)
		return false
	}
	a.log.Info("trainer runs in restart mode: the job batches joins for the restart settle window")
	return true
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
