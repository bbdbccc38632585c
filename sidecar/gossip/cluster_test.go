package gossip

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"testing"
	"time"
)

// awaitTimeout is how long a test waits for an event that should come in
// about a second; generous, so a loaded machine does not fail the test.
const awaitTimeout = 20 * time.Second

// recorder is an Events that forwards every event to a channel.
type recorder struct {
	dead, left, joined, closed chan string
	addrs                      chan net.IP
}

func newRecorder() *recorder {
	return &recorder{
		dead:   make(chan string, 256),
		left:   make(chan string, 256),
		joined: make(chan string, 256),
		closed: make(chan string, 256),
		addrs:  make(chan net.IP, 256),
	}
}

func (r *recorder) MemberDead(name string, addr net.IP) {
	r.dead <- name
	r.addrs <- addr
}
func (r *recorder) MemberLeft(name string, _ net.IP)   { r.left <- name }
func (r *recorder) MemberJoined(name string, _ net.IP) { r.joined <- name }
func (r *recorder) MemberClosed(name string)           { r.closed <- name }

var (
	_ LeaveEvents = (*recorder)(nil)
	_ JoinEvents  = (*recorder)(nil)
	_ CloseEvents = (*recorder)(nil)
)

type member struct {
	name string
	g    *Gossip
	rec  *recorder
}

// loopbackConfig is DefaultConfig on loopback with a free port.
func loopbackConfig(name string) Config {
	cfg := DefaultConfig(name)
	cfg.BindAddr = "127.0.0.1"
	cfg.BindPort = 0
	cfg.Logger = slog.New(slog.DiscardHandler)
	return cfg
}

// testConfig is loopbackConfig with a suspicion of 2 s instead of 0.4 s.
// Tests run many members in one process under the race detector on shared
// machines, where a live member can be starved of CPU for longer than the
// default tolerates; they check what is reported, not how fast.
func testConfig(name string) Config {
	cfg := loopbackConfig(name)
	cfg.SuspicionMult = 10
	return cfg
}

// startMember starts one member and closes it when the test ends.
func startMember(tb testing.TB, cfg Config) *member {
	tb.Helper()
	rec := newRecorder()
	g, err := Start(context.Background(), cfg, rec)
	if err != nil {
		tb.Fatalf("start %s: %v", cfg.Name, err)
	}
	tb.Cleanup(func() { _ = g.Close() })
	return &member{name: cfg.Name, g: g, rec: rec}
}

// startCluster starts n members, joins them through the first and waits
// until each has seen every other join.
func startCluster(tb testing.TB, n int, configure func(*Config)) []*member {
	tb.Helper()
	members := make([]*member, n)
	for i := range members {
		cfg := testConfig(fmt.Sprintf("m%02d", i))
		if configure != nil {
			configure(&cfg)
		}
		members[i] = startMember(tb, cfg)
	}
	seed := []string{members[0].g.LocalAddr()}
	for _, m := range members[1:] {
		ctx, cancel := context.WithTimeout(context.Background(), awaitTimeout)
		joined, err := m.g.Join(ctx, seed)
		cancel()
		if err != nil || joined != 1 {
			tb.Fatalf("%s joins %v: joined %d, err %v", m.name, seed, joined, err)
		}
	}
	for _, m := range members {
		awaitNames(tb, m.rec.joined, n-1, m.name+" sees the others join")
	}
	return members
}

// awaitNames waits for count distinct names on ch and returns them.
func awaitNames(tb testing.TB, ch <-chan string, count int, what string) map[string]bool {
	tb.Helper()
	seen := map[string]bool{}
	timeout := time.After(awaitTimeout)
	for len(seen) < count {
		select {
		case name := <-ch:
			seen[name] = true
		case <-timeout:
			tb.Fatalf("%s: saw %d of %d after %v: %v", what, len(seen), count, awaitTimeout, seen)
		}
	}
	return seen
}

// await waits for one name on ch.
func await(tb testing.TB, ch <-chan string, what string) string {
	tb.Helper()
	select {
	case name := <-ch:
		return name
	case <-time.After(awaitTimeout):
		tb.Fatalf("%s: nothing after %v", what, awaitTimeout)
		return ""
	}
}

// pending returns what ch holds now, without waiting.
func pending(ch <-chan string) []string {
	var names []string
	for {
		select {
		case name := <-ch:
			names = append(names, name)
		default:
			return names
		}
	}
}
