package sidecar

import (
	"sync"
	"time"
)

// Event is one line of the trainer's event stream.
type Event struct {
	// Type is "generation", "drain" or "member_dead".
	Type string    `json:"type"`
	Time time.Time `json:"time"`
	// Generation is set for "generation" events.
	Generation *Rendezvous `json:"generation,omitempty"`
	// Member names the dead member of a "member_dead" event.
	Member string `json:"member,omitempty"`
	// Reason says why a drain started (SIGTERM, a node taint, a leave
	// request) and Deadline when it will leave regardless.
	Reason   string     `json:"reason,omitempty"`
	Deadline *time.Time `json:"deadline,omitempty"`
}

// broadcaster fans events out to the event-stream subscribers. A
// subscriber that falls behind by a full buffer is dropped (its channel is
// closed): a trainer must reconnect rather than miss a drain silently.
type broadcaster struct {
	mu   sync.Mutex
	subs map[chan Event]struct{}
}

const subscriberBuffer = 64

func newBroadcaster() *broadcaster {
	return &broadcaster{subs: make(map[chan Event]struct{})}
}

func (b *broadcaster) subscribe() chan Event {
	ch := make(chan Event, subscriberBuffer)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.subs[ch] = struct{}{}
	return ch
}

func (b *broadcaster) unsubscribe(ch chan Event) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.subs[ch]; ok {
		delete(b.subs, ch)
		close(ch)
	}
}

func (b *broadcaster) publish(e Event) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for ch := range b.subs {
		select {
		case ch <- e:
		default:
			delete(b.subs, ch)
			close(ch)
		}
	}
}

// closeAll ends every stream.
func (b *broadcaster) closeAll() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for ch := range b.subs {
		delete(b.subs, ch)
		close(ch)
	}
}
