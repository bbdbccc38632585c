package main

import (
	"context"
	"errors"
	"time"

	"github.com/ringside/ringside/trainer/api"
)

// watchEvents follows the sidecar's event stream until ctx ends,
// reconnecting when it breaks: a new stream starts with the current
// generation and any drain under way, so nothing is missed for long. It
// returns an error wrapping errSidecarLost once the sidecar has not
// answered for cfg.ConnectTimeout: a trainer that lost its sidecar is out
// of the job (its lease runs out), and must not train on by itself.
func (t *trainer) watchEvents(ctx context.Context) error {
	backoff := 50 * time.Millisecond
	var failingSince time.Time
	for {
		events, err := t.api.Events(ctx)
		if err == nil {
			failingSince, backoff = time.Time{}, 50*time.Millisecond
			for e := range events {
				t.handleEvent(e)
			}
			err = errors.New("the event stream ended")
		}
		if ctx.Err() != nil {
			return nil
		}
		if failingSince.IsZero() {
			failingSince = time.Now()
		}
		if time.Since(failingSince) > t.cfg.ConnectTimeout {
			return t.sidecarLost(err)
		}
		t.log.Debug("sidecar event stream unavailable; reconnecting", "err", err)
		if !sleep(ctx, backoff) {
			return nil
		}
		backoff = min(2*backoff, time.Second)
	}
}

func (t *trainer) handleEvent(e api.Event) {
	switch e.Type {
	case api.EventGeneration:
		if e.Generation != nil && t.gens.saw(e.Generation.Generation) {
			t.log.Debug("sidecar announced a generation", "generation", e.Generation.Generation,
				"state", e.Generation.State, "world", e.Generation.WorldSize)
		}
	case api.EventDrain:
		if t.draining.CompareAndSwap(false, true) {
			t.log.Info("drain announced: finishing the current step, then waiting to be left out", "reason", e.Reason)
		}
	case api.EventMemberDead:
		t.log.Info("the sidecar declared a member dead", "dead", e.Member)
	}
}
