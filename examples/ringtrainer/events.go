package main

import (
	"context"
	"time"

	"github.com/ringside/ringside/sidecar"
)

// watchEvents follows the sidecar's event stream until ctx ends,
// reconnecting when it breaks: a new stream starts with the current
// generation and any drain under way, so nothing is missed for long.
func (t *trainer) watchEvents(ctx context.Context) {
	backoff := 50 * time.Millisecond
	for {
		events, err := t.api.Events(ctx)
		if err == nil {
			backoff = 50 * time.Millisecond
			for e := range events {
				t.handleEvent(e)
			}
		} else {
			t.log.Debug("sidecar event stream unavailable", "err", err)
		}
		if !sleep(ctx, backoff) {
			return
		}
		backoff = min(2*backoff, time.Second)
	}
}

func (t *trainer) handleEvent(e sidecar.Event) {
	switch e.Type {
	case "generation":
		if e.Generation != nil && t.gens.saw(e.Generation.Generation) {
			t.log.Debug("sidecar announced a generation", "generation", e.Generation.Generation,
				"state", e.Generation.State, "world", e.Generation.WorldSize)
		}
	case "drain":
		if t.draining.CompareAndSwap(false, true) {
			t.log.Info("drain announced: finishing the current step, then waiting to be left out", "reason", e.Reason)
		}
	case "member_dead":
		t.log.Info("the sidecar declared a member dead", "dead", e.Member)
	}
}
