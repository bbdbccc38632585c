package preempt

import "sync"

// requests tracks the list requests in flight. client-go's reflector lists
// on a goroutine that it does not wait for when its context ends; Watch waits
// here instead, so that no request is running and none starts after Watch
// returns. Watch requests need no tracking: the reflector makes them on its
// own goroutine, which the informer waits for.
type requests struct {
	mu       sync.Mutex
	closed   bool
	inFlight sync.WaitGroup
}

// start reports whether a request may begin; if so, the caller must call done
// when it ends.
func (r *requests) start() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.inFlight.Add(1)
	return true
}

// done marks the end of a request that start let begin.
func (r *requests) done() { r.inFlight.Done() }

// closeAndWait stops new requests and waits for those in flight.
func (r *requests) closeAndWait() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.inFlight.Wait()
}
