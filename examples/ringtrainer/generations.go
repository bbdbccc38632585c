package main

import (
	"context"
	"errors"
	"sync"
)

// errNewGeneration is the cause of a generation's context when the
// sidecar announced a newer one.
var errNewGeneration = errors.New("ringtrainer: the sidecar announced a new generation")

// generations knows the newest generation the sidecar announced and
// aborts the one being trained the moment a newer one is known, so a step
// blocked on a dead or departing peer returns at once.
type generations struct {
	mu      sync.Mutex
	latest  int64
	current int64
	entered int // counts enter calls, so leave clears only its own abort
	abort   context.CancelCauseFunc
}

// saw records that generation n exists, aborting an older one in
// training; it reports whether n is newer than any seen before.
func (g *generations) saw(n int64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if n <= g.latest {
		return false
	}
	g.latest = n
	if g.abort != nil && n > g.current {
		g.abort(errNewGeneration)
		g.abort = nil
	}
	return true
}

// newer reports whether a generation after n is known.
func (g *generations) newer(n int64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.latest > n
}

// enter returns the context to train generation n in: it is cancelled
// with errNewGeneration as soon as a newer generation is seen (at once if
// one is known already), and by leave.
func (g *generations) enter(parent context.Context, n int64) (ctx context.Context, leave func()) {
	ctx, cancel := context.WithCancelCause(parent)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.entered++
	id := g.entered
	if g.latest > n {
		cancel(errNewGeneration)
	} else {
		g.current, g.abort = n, cancel
	}
	return ctx, func() {
		g.mu.Lock()
		if g.entered == id {
			g.abort = nil
		}
		g.mu.Unlock()
		cancel(context.Canceled)
	}
}
