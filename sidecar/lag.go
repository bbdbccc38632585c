package sidecar

import (
	"context"
	"math"
	"sync"
	"time"
)

// The lag meter's tick, and how fast what it measured fades: a stall
// counts fully at once and by half lagHalfLife later.
const (
	lagTick     = 100 * time.Millisecond
	lagHalfLife = 30 * time.Second
)

// lagMeter measures how long this process goes unscheduled: how late a
// ticker's ticks arrive, the largest lateness seen, fading with time. On
// a host whose cores keep up it stays within a few milliseconds; where
// processes queue for a core (a node overloaded, dozens of sidecars on
// two cores) it is the time any of them may stay silent while alive.
type lagMeter struct {
	mu  sync.Mutex
	lag time.Duration // the largest lateness, as measured at
	at  time.Time
}

// run ticks until ctx ends.
func (l *lagMeter) run(ctx context.Context) {
	t := time.NewTicker(lagTick)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			now := time.Now()
			l.observe(now, now.Sub(last)-lagTick)
			last = now
		}
	}
}

// observe records a tick late by d at now.
func (l *lagMeter) observe(now time.Time, d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if d > l.decayed(now) {
		l.lag, l.at = d, now
	}
}

// recent is the largest lateness, faded by its age.
func (l *lagMeter) recent() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.decayed(time.Now())
}

func (l *lagMeter) decayed(now time.Time) time.Duration {
	if l.lag <= 0 {
		return 0
	}
	return time.Duration(float64(l.lag) * math.Exp2(-now.Sub(l.at).Seconds()/lagHalfLife.Seconds()))
}
