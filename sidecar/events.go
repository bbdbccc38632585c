package sidecar

import (
	"sync"

	"github.com/ringside/ringside/trainer/api"
)

// broadcaster fans events out to the event-stream subscribers. A
// subscriber that falls behind by a full buffer is dropped (its channel is
// closed): a trainer must reconnect rather than miss a drain silently.
type broadcaster struct {
	mu   sync.Mutex
	subs map[chan api.Event]struct{}
}

const subscriberBuffer = 64

func newBroadcaster() *broadcaster {
	return &broadcaster{subs: make(map[chan api.Event]struct{})}
}

func (b *broadcaster) subscribe() chan api.Event {
	ch := make(chan api.Event, subscriberBuffer)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.subs[ch] = struct{}{}
	return ch
}

func (b *broadcaster) unsubscribe(ch chan api.Event) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.subs[ch]; ok {
		delete(b.subs, ch)
		close(ch)
	}
}

func (b *broadcaster) publish(e api.Event) {
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
