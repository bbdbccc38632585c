package gossip

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestSilentDeathIsReportedOnceByEverySurvivor(t *testing.T) {
	members := startCluster(t, 5, nil)
	victim := members[2]
	if err := victim.g.Close(); err != nil { // no Leave: a silent death
		t.Fatal(err)
	}
	var survivors []*member
	for _, m := range members {
		if m != victim {
			survivors = append(survivors, m)
		}
	}
	for _, m := range survivors {
		if got := await(t, m.rec.dead, m.name+" reports a death"); got != victim.name {
			t.Errorf("%s reported %s dead, want %s", m.name, got, victim.name)
		}
		if addr := <-m.rec.addrs; !addr.Equal(net.IPv4(127, 0, 0, 1)) {
			t.Errorf("%s reported the dead member at %v, want 127.0.0.1", m.name, addr)
		}
	}
	for _, m := range survivors {
		if extra := pending(m.rec.dead); len(extra) > 0 {
			t.Errorf("%s reported more deaths: %v", m.name, extra)
		}
		if left := pending(m.rec.left); len(left) > 0 {
			t.Errorf("%s reported departures: %v", m.name, left)
		}
		if got := m.g.Members(); got != len(survivors) {
			t.Errorf("%s counts %d members, want %d", m.name, got, len(survivors))
		}
	}
}

func TestGracefulLeaveIsNotADeath(t *testing.T) {
	members := startCluster(t, 5, nil)
	leaver := members[3]
	ctx, cancel := context.WithTimeout(context.Background(), awaitTimeout)
	defer cancel()
	if err := leaver.g.Leave(ctx); err != nil {
		t.Fatalf("leave: %v", err)
	}
	if err := leaver.g.Close(); err != nil {
		t.Fatal(err)
	}
	for _, m := range members {
		if m == leaver {
			continue
		}
		select {
		case got := <-m.rec.left:
			if got != leaver.name {
				t.Errorf("%s reported %s left, want %s", m.name, got, leaver.name)
			}
		case got := <-m.rec.dead:
			t.Errorf("%s reported %s dead after a graceful leave", m.name, got)
		case <-time.After(awaitTimeout):
			t.Fatalf("%s reported nothing %v after the leave", m.name, awaitTimeout)
		}
		if dead := pending(m.rec.dead); len(dead) > 0 {
			t.Errorf("%s reported deaths after a graceful leave: %v", m.name, dead)
		}
	}
}

func TestOwnProbeFailureCountsAsSuspectUntilDeath(t *testing.T) {
	suspected := make(chan string, 64)
	members := startCluster(t, 3, func(cfg *Config) {
		cfg.suspectHook = func(name string) {
			select {
			case suspected <- name:
			default: // never block memberlist's probe
			}
		}
	})
	victim := members[1]
	if err := victim.g.Close(); err != nil {
		t.Fatal(err)
	}
	for {
		if name := await(t, suspected, "a survivor suspects"); name == victim.name {
			break
		}
	}
	total := 0
	for _, m := range members {
		if m != victim {
			total += m.g.Suspects()
		}
	}
	if total < 1 {
		t.Errorf("survivors count %d suspects before the death, want at least 1", total)
	}
	for _, m := range members {
		if m == victim {
			continue
		}
		await(t, m.rec.dead, m.name+" reports the death")
		if got := m.g.Suspects(); got != 0 {
			t.Errorf("%s counts %d suspects after the death, want 0", m.name, got)
		}
	}
}

func TestJoin(t *testing.T) {
	key1 := []byte("0123456789abcdef")
	key2 := []byte("fedcba9876543210")
	tests := []struct {
		name       string
		seed, join func(*Config)
		wantJoined bool
	}{
		{
			name:       "members with the same key join",
			seed:       func(c *Config) { c.Keys = [][]byte{key1} },
			join:       func(c *Config) { c.Keys = [][]byte{key1} },
			wantJoined: true,
		},
		{
			name: "members with different keys do not join",
			seed: func(c *Config) { c.Keys = [][]byte{key1} },
			join: func(c *Config) { c.Keys = [][]byte{key2} },
		},
		{
			name: "a member without a key does not join an encrypted one",
			seed: func(c *Config) { c.Keys = [][]byte{key1} },
			join: func(*Config) {},
		},
		{
			name: "members of different jobs do not join",
			seed: func(c *Config) { c.Label = "ringside/ns/job-a" },
			join: func(c *Config) { c.Label = "ringside/ns/job-b" },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			seedCfg, joinCfg := testConfig("seed"), testConfig("joiner")
			tt.seed(&seedCfg)
			tt.join(&joinCfg)
			seed, joiner := startMember(t, seedCfg), startMember(t, joinCfg)
			ctx, cancel := context.WithTimeout(context.Background(), awaitTimeout)
			defer cancel()
			n, err := joiner.g.Join(ctx, []string{seed.g.LocalAddr()})
			if tt.wantJoined {
				if err != nil || n != 1 {
					t.Fatalf("join: joined %d, err %v; want 1, nil", n, err)
				}
				await(t, seed.rec.joined, "the seed sees the joiner")
				return
			}
			if err == nil && n > 0 {
				t.Fatalf("join: joined %d without error; want no join", n)
			}
			if got := seed.g.Members(); got != 1 {
				t.Errorf("seed counts %d members, want 1", got)
			}
		})
	}
}

func TestJoinWithNoSeedsIsNotAnError(t *testing.T) {
	m := startMember(t, testConfig("first"))
	if n, err := m.g.Join(context.Background(), nil); n != 0 || err != nil {
		t.Fatalf("join nil: %d, %v; want 0, nil", n, err)
	}
}

func TestLocalAddrIsTheBoundPort(t *testing.T) {
	m := startMember(t, testConfig("solo"))
	host, port, err := net.SplitHostPort(m.g.LocalAddr())
	if err != nil {
		t.Fatal(err)
	}
	if host != "127.0.0.1" || port == "0" {
		t.Fatalf("LocalAddr = %s, want 127.0.0.1 and the port picked", m.g.LocalAddr())
	}
}

func TestMethodsAfterCloseReturnErrClosed(t *testing.T) {
	m := startMember(t, testConfig("closed"))
	if err := m.g.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.g.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	ctx := context.Background()
	if err := m.g.Leave(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("Leave after Close: %v, want ErrClosed", err)
	}
	if _, err := m.g.Join(ctx, []string{"127.0.0.1:1"}); !errors.Is(err, ErrClosed) {
		t.Errorf("Join after Close: %v, want ErrClosed", err)
	}
}

func TestJoinReturnsWhenContextEnds(t *testing.T) {
	// A seed that accepts the push/pull stream and never answers keeps
	// memberlist waiting for its stream timeout; the caller's context is
	// cancelled as soon as the seed has the connection.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	accepted := make(chan net.Conn, 1)
	go func() {
		conn, err := ln.Accept()
		if err == nil {
			accepted <- conn
			cancel()
		}
	}()
	cfg := testConfig("patient")
	cfg.StreamTimeout = 2 * time.Second
	m := startMember(t, cfg)
	if _, err := m.g.Join(ctx, []string{ln.Addr().String()}); !errors.Is(err, context.Canceled) {
		t.Fatalf("join: %v, want context.Canceled", err)
	}
	conn := <-accepted
	defer conn.Close()
}

func TestStartRejectsBadConfig(t *testing.T) {
	tests := []struct {
		name      string
		configure func(*Config)
		want      string
	}{
		{"an empty name", func(c *Config) { c.Name = "" }, "name is empty"},
		{"a key of the wrong size", func(c *Config) { c.Keys = [][]byte{[]byte("short")} }, "key 1: 5 bytes"},
		{"a probe timeout as long as the interval", func(c *Config) { c.ProbeTimeout = c.ProbeInterval }, "probe timeout"},
		{"a suspicion multiplier of zero", func(c *Config) { c.SuspicionMult = 0 }, "suspicion multiplier"},
		{"a port out of range", func(c *Config) { c.BindPort = 70000 }, "bind port 70000"},
		{"a label too long", func(c *Config) { c.Label = strings.Repeat("x", 256) }, "label is 256 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig("bad")
			tt.configure(&cfg)
			g, err := Start(context.Background(), cfg, EventsFunc(func(string, net.IP) {}))
			if err == nil {
				_ = g.Close()
				t.Fatal("Start succeeded")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q does not mention %q", err, tt.want)
			}
		})
	}
}

func TestSuspicionTimeoutFollowsMemberlistFormula(t *testing.T) {
	cfg := DefaultConfig("x")
	tests := []struct {
		members int
		want    time.Duration
	}{
		{1, 400 * time.Millisecond},
		{8, 400 * time.Millisecond},
		{10, 400 * time.Millisecond},
		{32, 602 * time.Millisecond},
		{64, 722 * time.Millisecond},
	}
	for _, tt := range tests {
		if got := cfg.SuspicionTimeout(tt.members).Round(time.Millisecond); got != tt.want {
			t.Errorf("SuspicionTimeout(%d) = %v, want %v", tt.members, got, tt.want)
		}
	}
}

func TestCheckTellsALiveMemberFromAGoneOne(t *testing.T) {
	members := startCluster(t, 3, nil)
	ctx, cancel := context.WithTimeout(context.Background(), awaitTimeout)
	defer cancel()
	checker, live, victim := members[0], members[1], members[2]
	if st, err := checker.g.Check(ctx, live.name); err != nil || st != Answered {
		t.Errorf("check of a live member: %v, %v; want answered", st, err)
	}
	if checker.g.Gone(ctx, live.name) {
		t.Error("a live member's port refused a connection")
	}
	if err := victim.g.Close(); err != nil {
		t.Fatal(err)
	}
	if st, err := checker.g.Check(ctx, victim.name); err != nil || st != Gone {
		t.Errorf("check of a closed member: %v, %v; want gone", st, err)
	}
	if !checker.g.Gone(ctx, victim.name) {
		t.Error("a closed member's port did not refuse a connection")
	}
}

// A member being killed closes its sockets one by one: the check that its
// closed watch set off may find its gossip port still accepting, and then
// refusing a moment later. The check must see the refusal, not wait out
// the unanswered ping and call the member silent.
func TestCheckSeesAPortThatStopsAcceptingWhileThePingIsPending(t *testing.T) {
	members := startCluster(t, 1, func(c *Config) { c.ProbeTimeout = 2 * time.Second; c.ProbeInterval = 4 * time.Second })
	g := members[0].g
	dying, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := uint16(dying.Addr().(*net.TCPAddr).Port)
	accepted := make(chan struct{})
	go func() {
		if c, err := dying.Accept(); err == nil { // the check's first dial
			c.Close()
			close(accepted)
		}
	}()
	g.dlg.mu.Lock()
	g.dlg.known["dying"] = peer{addr: net.IPv4(127, 0, 0, 1), port: port} // no UDP socket: pings go unanswered
	g.dlg.mu.Unlock()
	go func() {
		<-accepted
		dying.Close() // the process's listener goes after its other sockets
	}()
	ctx, cancel := context.WithTimeout(context.Background(), awaitTimeout)
	defer cancel()
	if st, err := g.check(ctx, "dying"); err != nil || st != Gone {
		t.Errorf("check of a member whose port began refusing during the check: %v, %v; want gone", st, err)
	}
}

// fullListener listens on a loopback port with an accept queue of one
// that it fills and never accepts from: the kernel drops every further
// SYN, as it would find no node at all, and a dial gets no handshake.
func fullListener(t *testing.T) peer {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	p := peer{addr: net.IPv4(127, 0, 0, 1), port: uint16(sa.(*syscall.SockaddrInet4).Port)}
	conn, err := net.Dial("tcp", net.JoinHostPort(p.addr.String(), fmt.Sprint(p.port)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return p
}

func TestDialTellsARefusalAnAcceptAndNoAnswerApart(t *testing.T) {
	members := startCluster(t, 2, nil)
	g, live := members[0].g, members[1]
	seen, ok := g.dlg.lastSeen(live.name)
	if !ok {
		t.Fatalf("%s never seen", live.name)
	}
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := uint16(closed.Addr().(*net.TCPAddr).Port)
	closed.Close()
	for _, tc := range []struct {
		name string
		p    peer
		want dialResult
	}{
		{"a live member's port accepts", seen, dialAccepted},
		{"a port nobody listens on refuses", peer{addr: net.IPv4(127, 0, 0, 1), port: closedPort}, dialRefused},
		{"a node that drops the handshake does not answer", fullListener(t), dialNoAnswer},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			if got := g.dial(ctx, tc.p); got != tc.want {
				t.Errorf("dial = %d, want %d", got, tc.want)
			}
		})
	}
}
