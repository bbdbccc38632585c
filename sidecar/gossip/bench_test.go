package gossip

import (
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"
)

// BenchmarkDetect measures failure detection with DefaultConfig on loopback:
// the time from a member's silent death (Close without Leave, as a kill -9
// closes its sockets) until every survivor's MemberDead has fired. Each
// iteration forms a fresh job, lets it idle for 2 s (any death reported then
// is a false positive), and kills one member. Run it with
//
//	go test -run '^$' -bench Detect -benchtime 5x ./sidecar/gossip
//
// ns/op is the mean detection time; detect-p50-s and detect-max-s are the
// median and worst over the iterations.
func BenchmarkDetect(b *testing.B) {
	for _, n := range []int{8, 32} {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			var detections []time.Duration
			falsePositives := 0
			b.StopTimer()
			for range b.N {
				d, fp := detectOnce(b, n, 2*time.Second, nil)
				detections = append(detections, d)
				falsePositives += fp
			}
			slices.Sort(detections)
			b.ReportMetric(detections[len(detections)/2].Seconds(), "detect-p50-s")
			b.ReportMetric(detections[len(detections)-1].Seconds(), "detect-max-s")
			b.ReportMetric(float64(falsePositives), "false-positives")
		})
	}
}

// detectOnce forms a job of n members, configured by configure if not nil,
// idles, kills one and returns how long until all survivors reported it, and
// how many other deaths were reported.
func detectOnce(b *testing.B, n int, idle time.Duration, configure func(*Config)) (time.Duration, int) {
	clock := &deathClock{
		survivors: n - 1,
		logf:      b.Logf,
		all:       make(chan struct{}),
		formed:    make(chan struct{}),
		joins:     map[string]int{},
	}
	members := make([]*Gossip, n)
	for i := range members {
		cfg := loopbackConfig(fmt.Sprintf("m%02d", i))
		if configure != nil {
			configure(&cfg)
		}
		g, err := Start(b.Context(), cfg, &clockEvents{member: cfg.Name, clock: clock})
		if err != nil {
			b.Fatal(err)
		}
		members[i] = g
		if i > 0 {
			if _, err := g.Join(b.Context(), []string{members[0].LocalAddr()}); err != nil {
				b.Fatal(err)
			}
		}
	}
	defer func() {
		for _, g := range members {
			_ = g.Close()
		}
	}()
	select {
	case <-clock.formed:
	case <-time.After(30 * time.Second):
		b.Fatalf("the %d members did not all see each other join", n)
	}
	time.Sleep(idle) // the window for false positives

	victim := members[n/2]
	clock.kill(victim.cfg.Name)
	b.StartTimer()
	_ = victim.Close()
	select {
	case <-clock.all:
	case <-time.After(30 * time.Second):
		b.Fatalf("not all %d survivors reported the death", n-1)
	}
	b.StopTimer()
	clock.mu.Lock()
	defer clock.mu.Unlock()
	return clock.last.Sub(clock.killed), clock.falsePositives
}

type deathClock struct {
	survivors int
	logf      func(format string, args ...any)
	all       chan struct{} // closed when every survivor reported the victim
	formed    chan struct{} // closed when every member saw all others join

	mu             sync.Mutex
	joins          map[string]int // joins seen by each member
	complete       int            // members that saw all others join
	victim         string
	killed, last   time.Time
	seen           map[string]bool
	falsePositives int
}

func (c *deathClock) joined(member string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.joins[member]++
	if c.joins[member] == c.survivors {
		c.complete++
		if c.complete == c.survivors+1 {
			close(c.formed)
		}
	}
}

func (c *deathClock) kill(victim string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.victim, c.killed, c.seen = victim, time.Now(), map[string]bool{}
}

func (c *deathClock) dead(member, name string, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if name != c.victim {
		c.falsePositives++
		c.logf("false positive: %s reports %s dead (victim %q)", member, name, c.victim)
		return
	}
	if c.seen[member] {
		return
	}
	c.seen[member] = true
	c.last = at
	if len(c.seen) == c.survivors {
		close(c.all)
	}
}

type clockEvents struct {
	member string
	clock  *deathClock
}

func (e *clockEvents) MemberDead(name string, _ net.IP) { e.clock.dead(e.member, name, time.Now()) }
func (e *clockEvents) MemberJoined(string, net.IP)      { e.clock.joined(e.member) }
