package sidecar

import (
	"testing"
	"time"
)

func TestPresence(t *testing.T) {
	const timeout = time.Second
	tests := []struct {
		name         string
		do           func(p *presence)
		after        time.Duration // when attached is asked, from now
		wantAttached bool
		wantSeen     bool
	}{
		{name: "a trainer never heard from is not seen",
			do: func(*presence) {}, wantAttached: false, wantSeen: false},
		{name: "an open event stream is attached whatever the time",
			do: func(p *presence) { p.streamOpened() }, after: time.Hour, wantAttached: true, wantSeen: true},
		{name: "a stream the trainer closed is gone at once",
			do:    func(p *presence) { p.streamOpened(); p.streamClosed(true) },
			after: 0, wantAttached: false, wantSeen: true},
		{name: "a stream the trainer closed is gone at once, even right after a heartbeat",
			do:    func(p *presence) { p.streamOpened(); p.heartbeat(); p.streamClosed(true) },
			after: 0, wantAttached: false, wantSeen: true},
		{name: "one of two streams closed keeps the trainer attached",
			do:    func(p *presence) { p.streamOpened(); p.streamOpened(); p.streamClosed(true) },
			after: time.Hour, wantAttached: true, wantSeen: true},
		{name: "a stream the sidecar ended may be reopened within the timeout",
			do:    func(p *presence) { p.streamOpened(); p.streamClosed(false) },
			after: timeout / 2, wantAttached: true, wantSeen: true},
		{name: "a stream the sidecar ended and not reopened is gone after the timeout",
			do:    func(p *presence) { p.streamOpened(); p.streamClosed(false) },
			after: 2 * timeout, wantAttached: false, wantSeen: true},
		{name: "a heartbeat keeps a trainer without a stream attached for the timeout",
			do: func(p *presence) { p.heartbeat() }, after: timeout / 2, wantAttached: true, wantSeen: true},
		{name: "heartbeats that stopped are gone after the timeout",
			do: func(p *presence) { p.heartbeat() }, after: 2 * timeout, wantAttached: false, wantSeen: true},
		{name: "a heartbeat after a closed stream attaches again",
			do:    func(p *presence) { p.streamOpened(); p.streamClosed(true); p.heartbeat() },
			after: 0, wantAttached: true, wantSeen: true},
		{name: "a poll in progress is attached",
			do:    func(p *presence) { p.heartbeat(); p.pollStarted() },
			after: time.Hour, wantAttached: true, wantSeen: true},
		{name: "a trainer that only polls gives nothing to watch and stays attached",
			do:    func(p *presence) { p.pollStarted(); p.pollEnded(true) },
			after: time.Hour, wantAttached: true, wantSeen: true},
		{name: "an answered poll counts as a sign of a heartbeating trainer",
			do:    func(p *presence) { p.heartbeat(); p.pollStarted(); p.pollEnded(true) },
			after: timeout / 2, wantAttached: true, wantSeen: true},
		{name: "a poll hung up with the stream (a crash) does not delay the stream's end",
			do:    func(p *presence) { p.streamOpened(); p.pollStarted(); p.streamClosed(true); p.pollEnded(false) },
			after: 0, wantAttached: false, wantSeen: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPresence(timeout)
			tt.do(p)
			attached, seen, _, why := p.attached(time.Now().Add(tt.after))
			if attached != tt.wantAttached || seen != tt.wantSeen {
				t.Fatalf("attached, seen = %v, %v (%q), want %v, %v", attached, seen, why, tt.wantAttached, tt.wantSeen)
			}
			if !attached && seen && why == "" {
				t.Error("a trainer taken for gone has no reason")
			}
		})
	}
}

func TestTrainerState(t *testing.T) {
	start := time.Now()
	tests := []struct {
		name           string
		await          bool
		grace          time.Duration
		attached, seen bool
		at             time.Duration // after start
		want           string
	}{
		{name: "an attached trainer is active", attached: true, seen: true, want: "active"},
		{name: "a trainer gone is pending", seen: true, want: "pending"},
		{name: "a trainer gone is pending with await-trainer too", await: true, seen: true, want: "pending"},
		{name: "await-trainer waits for the first attach", await: true, want: "pending"},
		{name: "without await-trainer or a grace a trainer never seen stays active", at: time.Hour, want: "active"},
		{name: "within the start grace a trainer never seen stays active", grace: time.Minute, at: time.Second, want: "active"},
		{name: "after the start grace a trainer never seen is pending", grace: time.Minute, at: 2 * time.Minute, want: "pending"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := &Agent{cfg: Config{AwaitTrainer: tt.await, TrainerStartGrace: tt.grace}}
			got, recheck := a.trainerState(tt.attached, tt.seen, start.Add(tt.at), start)
			if string(got) != tt.want {
				t.Fatalf("state %s, want %s", got, tt.want)
			}
			if wantRecheck := tt.grace > 0 && tt.at < tt.grace && !tt.seen; wantRecheck != !recheck.IsZero() {
				t.Errorf("recheck at %v; want one only before the start grace ends", recheck)
			}
		})
	}
}
