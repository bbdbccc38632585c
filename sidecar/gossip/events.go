package gossip

import (
	"net"
	"sync"
)

// Events receives the verdicts of gossip. Its methods are called one at a
// time, in order, on a goroutine owned by the Gossip, never while memberlist
// holds a lock: they may block (a slow handler delays later events, not
// failure detection) and may call the Gossip's methods, except Close, which
// waits for them.
type Events interface {
	// MemberDead is called once each time another member is declared dead:
	// it stopped answering probes (killed, frozen, partitioned) without
	// leaving. addr is the IP it gossiped from, the pod IP.
	MemberDead(name string, addr net.IP)
}

// LeaveEvents is implemented by Events that also want to hear of members that
// left gracefully (Gossip.Leave); such a departure is not reported as a death.
type LeaveEvents interface {
	MemberLeft(name string, addr net.IP)
}

// JoinEvents is implemented by Events that also want to hear of members that
// joined, or came back after being declared dead or leaving.
type JoinEvents interface {
	MemberJoined(name string, addr net.IP)
}

// SuspectEvents is implemented by Events that also want to hear of this
// member's own probes: MemberSuspect when one of them found another member
// unresponsive (its direct probe, or a Check, went unanswered for
// ProbeTimeout), MemberAnswered when
// a suspect answers again or is heard alive. Gossip's own verdict
// (MemberDead) follows a suspicion only after the suspicion timeout.
type SuspectEvents interface {
	MemberSuspect(name string, addr net.IP)
	MemberAnswered(name string)
}

// CloseEvents is implemented by Events that also want to hear that a
// member this one watches (see Gossip.Watch) closed its watch connection,
// or refused one: its process most likely exited. It is a prompt to check
// the member, not a verdict.
type CloseEvents interface {
	MemberClosed(name string)
}

// EventsFunc adapts a function to Events.
type EventsFunc func(name string, addr net.IP)

// MemberDead calls f.
func (f EventsFunc) MemberDead(name string, addr net.IP) { f(name, addr) }

var _ Events = EventsFunc(nil)

type eventKind int

const (
	memberDead eventKind = iota
	memberLeft
	memberJoined
	memberSuspect
	memberAnswered
	memberClosed
)

type event struct {
	kind eventKind
	name string
	addr net.IP
}

// dispatcher hands events to Events on its own goroutine, so memberlist's
// callbacks, which run under memberlist's node lock, only append to a slice.
type dispatcher struct {
	events Events

	mu      sync.Mutex
	pending []event
	stopped bool

	wake chan struct{} // capacity 1: a pending wake-up
	stop chan struct{} // closed by close
	done chan struct{} // closed when run returns
}

func newDispatcher(events Events) *dispatcher {
	d := &dispatcher{
		events: events,
		wake:   make(chan struct{}, 1),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	go d.run()
	return d
}

// push queues e; it never blocks. Events pushed after close are dropped.
func (d *dispatcher) push(e event) {
	d.mu.Lock()
	if d.stopped {
		d.mu.Unlock()
		return
	}
	d.pending = append(d.pending, e)
	d.mu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

func (d *dispatcher) run() {
	defer close(d.done)
	for {
		select {
		case <-d.stop:
			return
		case <-d.wake:
		}
		d.mu.Lock()
		batch := d.pending
		d.pending = nil
		d.mu.Unlock()
		for _, e := range batch {
			select {
			case <-d.stop:
				return
			default:
			}
			d.deliver(e)
		}
	}
}

func (d *dispatcher) deliver(e event) {
	switch e.kind {
	case memberDead:
		d.events.MemberDead(e.name, e.addr)
	case memberLeft:
		if l, ok := d.events.(LeaveEvents); ok {
			l.MemberLeft(e.name, e.addr)
		}
	case memberJoined:
		if j, ok := d.events.(JoinEvents); ok {
			j.MemberJoined(e.name, e.addr)
		}
	case memberSuspect:
		if s, ok := d.events.(SuspectEvents); ok {
			s.MemberSuspect(e.name, e.addr)
		}
	case memberAnswered:
		if s, ok := d.events.(SuspectEvents); ok {
			s.MemberAnswered(e.name)
		}
	case memberClosed:
		if c, ok := d.events.(CloseEvents); ok {
			c.MemberClosed(e.name)
		}
	}
}

// close drops pending events, waits for a handler that is running to return,
// and stops the goroutine. It is safe to call more than once.
func (d *dispatcher) close() {
	d.mu.Lock()
	if !d.stopped {
		d.stopped = true
		d.pending = nil
		close(d.stop)
	}
	d.mu.Unlock()
	<-d.done
}
