package sidecar

import (
	"net/http"
	"net/http/httptest"
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
			do: func(p *presence) { p.streamOpened(noSlot) }, after: time.Hour, wantAttached: true, wantSeen: true},
		{name: "a stream the trainer closed is gone at once",
			do:    func(p *presence) { p.streamOpened(noSlot); p.streamClosed(noSlot, true) },
			after: 0, wantAttached: false, wantSeen: true},
		{name: "a stream the trainer closed is gone at once, even right after a heartbeat",
			do:    func(p *presence) { p.streamOpened(noSlot); p.heartbeat(); p.streamClosed(noSlot, true) },
			after: 0, wantAttached: false, wantSeen: true},
		{name: "one of two streams closed keeps the trainer attached",
			do:    func(p *presence) { p.streamOpened(noSlot); p.streamOpened(noSlot); p.streamClosed(noSlot, true) },
			after: time.Hour, wantAttached: true, wantSeen: true},
		{name: "a stream the sidecar ended may be reopened within the timeout",
			do:    func(p *presence) { p.streamOpened(noSlot); p.streamClosed(noSlot, false) },
			after: timeout / 2, wantAttached: true, wantSeen: true},
		{name: "a stream the sidecar ended and not reopened is gone after the timeout",
			do:    func(p *presence) { p.streamOpened(noSlot); p.streamClosed(noSlot, false) },
			after: 2 * timeout, wantAttached: false, wantSeen: true},
		{name: "a heartbeat keeps a trainer without a stream attached for the timeout",
			do: func(p *presence) { p.heartbeat() }, after: timeout / 2, wantAttached: true, wantSeen: true},
		{name: "heartbeats that stopped are gone after the timeout",
			do: func(p *presence) { p.heartbeat() }, after: 2 * timeout, wantAttached: false, wantSeen: true},
		{name: "a heartbeat after a closed stream attaches again",
			do:    func(p *presence) { p.streamOpened(noSlot); p.streamClosed(noSlot, true); p.heartbeat() },
			after: 0, wantAttached: true, wantSeen: true},
		{name: "a poll in progress is attached",
			do:    func(p *presence) { p.heartbeat(); p.pollStarted(noSlot) },
			after: time.Hour, wantAttached: true, wantSeen: true},
		{name: "a trainer that only polls gives nothing to watch and stays attached",
			do:    func(p *presence) { p.pollStarted(noSlot); p.pollEnded(noSlot, true) },
			after: time.Hour, wantAttached: true, wantSeen: true},
		{name: "an answered poll counts as a sign of a heartbeating trainer",
			do:    func(p *presence) { p.heartbeat(); p.pollStarted(noSlot); p.pollEnded(noSlot, true) },
			after: timeout / 2, wantAttached: true, wantSeen: true},
		{name: "a poll hung up with the stream (a crash) does not delay the stream's end",
			do: func(p *presence) {
				p.streamOpened(noSlot)
				p.pollStarted(noSlot)
				p.streamClosed(noSlot, true)
				p.pollEnded(noSlot, false)
			},
			after: 0, wantAttached: false, wantSeen: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPresence(timeout, 1)
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

func TestPresenceOfSlots(t *testing.T) {
	const timeout = time.Second
	tests := []struct {
		name         string
		slots        int
		do           func(p *presence)
		after        time.Duration
		wantAttached bool
	}{
		{name: "one slot's stream is the trainer, as a stream naming none",
			slots: 1, do: func(p *presence) { p.streamOpened(0) }, after: time.Hour, wantAttached: true},
		{name: "one slot's stream closed is gone at once",
			slots: 1, do: func(p *presence) { p.streamOpened(0); p.streamClosed(0, true) }, wantAttached: false},
		{name: "every slot's stream open is attached",
			slots: 2, do: func(p *presence) { p.streamOpened(0); p.streamOpened(1) }, after: time.Hour, wantAttached: true},
		{name: "a member with one slot of two attached is not yet",
			slots: 2, do: func(p *presence) { p.streamOpened(0) }, wantAttached: false},
		{name: "one slot's process gone takes the member out though the other streams",
			slots: 2, do: func(p *presence) { p.streamOpened(0); p.streamOpened(1); p.streamClosed(1, true) }, wantAttached: false},
		{name: "a heartbeat of another slot does not stand for the one gone",
			slots: 2, do: func(p *presence) { p.streamOpened(0); p.streamOpened(1); p.streamClosed(1, true); p.heartbeat() },
			wantAttached: false},
		{name: "the other slot's poll does not stand for the one gone",
			slots: 2, do: func(p *presence) { p.streamOpened(0); p.streamOpened(1); p.streamClosed(1, true); p.pollStarted(0) },
			wantAttached: false},
		{name: "a slot's process back attaches the member again",
			slots: 2, do: func(p *presence) {
				p.streamOpened(0)
				p.streamOpened(1)
				p.streamClosed(1, true)
				p.streamOpened(1)
			}, after: time.Hour, wantAttached: true},
		{name: "a slot in a poll is there",
			slots: 2, do: func(p *presence) { p.streamOpened(0); p.streamOpened(1); p.pollStarted(1); p.streamClosed(1, true) },
			after: time.Hour, wantAttached: true},
		{name: "a slot's stream the sidecar ended may be reopened within the timeout",
			slots: 2, do: func(p *presence) { p.streamOpened(0); p.streamOpened(1); p.streamClosed(1, false) },
			after: timeout / 2, wantAttached: true},
		{name: "a stream naming no slot (restart mode's launcher) keeps the member attached",
			slots: 2, do: func(p *presence) {
				p.streamOpened(noSlot)
				p.streamOpened(0)
				p.streamOpened(1)
				p.streamClosed(1, true)
			},
			after: time.Hour, wantAttached: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPresence(timeout, tt.slots)
			tt.do(p)
			attached, seen, _, why := p.attached(time.Now().Add(tt.after))
			if attached != tt.wantAttached || !seen {
				t.Fatalf("attached, seen = %v, %v (%q), want %v, true", attached, seen, why, tt.wantAttached)
			}
			if !attached && why == "" {
				t.Error("a trainer taken for gone has no reason")
			}
		})
	}
}

func TestTrainerSlot(t *testing.T) {
	p := newPresence(time.Second, 2)
	for q, want := range map[string]int{"": noSlot, "local_rank=0": 0, "local_rank=1": 1, "local_rank=2": noSlot} {
		r := httptest.NewRequest(http.MethodGet, "/v1/events?"+q, nil)
		if got, err := p.trainerSlot(r); err != nil || got != want {
			t.Errorf("trainerSlot(%q) = %d, %v; want %d", q, got, err, want)
		}
	}
	for _, q := range []string{"local_rank=-1", "local_rank=x"} {
		if _, err := p.trainerSlot(httptest.NewRequest(http.MethodGet, "/v1/events?"+q, nil)); err == nil {
			t.Errorf("trainerSlot(%q) took it", q)
		}
	}
}
