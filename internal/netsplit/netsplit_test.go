package netsplit

import (
	"context"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// requireNamespaces skips a test where network namespaces cannot be made
// (not root, no ip or iptables-restore), except under CI=true, where it
// fails: CI must run it.
func requireNamespaces(t *testing.T) {
	t.Helper()
	err := Available()
	if err == nil {
		if out, lerr := exec.Command("ip", "netns", "list").CombinedOutput(); lerr != nil {
			err = &exec.Error{Name: "ip netns list: " + strings.TrimSpace(string(out)), Err: lerr}
		}
	}
	if err == nil {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("network namespaces are needed under CI=true: %v", err)
	}
	t.Skipf("no network namespaces here: %v", err)
}

func output(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// A run that crashed leaves its namespaces and bridge behind; the next
// one with the same prefix sweeps them and starts clean, its rules come
// and go with Apply and Heal, and Close leaves nothing named after it.
func TestNetCreatesCutsAndRemovesEverything(t *testing.T) {
	requireNamespaces(t)
	ctx := context.Background()
	const prefix = "rspt-"
	crashed, err := Create(ctx, prefix, 250, 2)
	if err != nil {
		t.Fatal(err)
	}
	_ = crashed // never closed, as by a crash
	nt, err := Create(ctx, prefix, 250, 2)
	if err != nil {
		t.Fatalf("Create over a crashed run's leftovers: %v", err)
	}
	t.Cleanup(func() { Sweep(context.Background(), prefix) }) //nolint:errcheck // the test checks Close below

	rules := Rules{}
	rules.Deaf(0, nt.Addr(1))
	rules.Mute(0, nt.BridgeAddr())
	rules.Lose(1, 0.05)
	if err := nt.Apply(ctx, rules); err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"-A INPUT -s " + nt.Addr(1) + "/32 -j DROP", "-m statistic --mode random --probability 0.04"} {
		if got := output(t, "ip", "netns", "exec", nt.Namespace(i), "iptables", "-S"); !strings.Contains(got, want) {
			t.Errorf("member %d's rules %q lack %q", i, got, want)
		}
	}
	if got := output(t, "ip", "netns", "exec", nt.Namespace(0), "iptables", "-S"); !strings.Contains(got, "-A OUTPUT -d "+nt.BridgeAddr()+"/32 -j DROP") {
		t.Errorf("member 0's rules %q lack the mute", got)
	}
	if err := nt.Heal(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if got := output(t, "ip", "netns", "exec", nt.Namespace(i), "iptables", "-S"); strings.Contains(got, "DROP") {
			t.Errorf("member %d keeps rules after the heal: %q", i, got)
		}
	}
	if err := nt.Close(); err != nil {
		t.Fatal(err)
	}
	if got := output(t, "ip", "netns", "list") + output(t, "ip", "-o", "link", "show"); strings.Contains(got, prefix) {
		t.Errorf("left behind after Close:\n%s", got)
	}
}

func TestCreateRefusesWhatCannotBeNamed(t *testing.T) {
	for _, tc := range []struct {
		name      string
		prefix    string
		subnet, n int
		want      string
	}{
		{"a subnet past 255", "rsp-", 256, 2, "subnet 256"},
		{"no members", "rsp-", 1, 0, "0 members"},
		{"a prefix too long for a link name", "ringside-partition-", 1, 2, "too long"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Create(context.Background(), tc.prefix, tc.subnet, tc.n); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Create = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// inNamespace runs f on a thread in the namespace of the file ns: the
// sockets f opens stay in it.
func inNamespace(t *testing.T, ns string, f func()) {
	t.Helper()
	runtime.LockOSThread()
	self, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	defer self.Close()
	target, err := os.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		t.Fatalf("enter %s: %v", ns, err)
	}
	f()
	if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
		t.Fatalf("leave %s: %v", ns, err) // the thread stays locked, and dies with the goroutine
	}
	runtime.UnlockOSThread()
}

// Jitter holds every packet a member receives for up to its maximum, and
// loses none; once stopped, packets go through again.
func TestJitterDelaysEveryPacketAndLosesNone(t *testing.T) {
	requireNamespaces(t)
	ctx := context.Background()
	const prefix = "rspj-"
	nt, err := Create(ctx, prefix, 249, 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nt.Close() }) //nolint:errcheck // the other test checks Close
	var echo, conn net.PacketConn
	inNamespace(t, nt.NamespacePath(1), func() { echo, err = net.ListenPacket("udp4", nt.Addr(1)+":9") })
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		buf := make([]byte, 64)
		for {
			n, from, err := echo.ReadFrom(buf)
			if err != nil {
				return
			}
			echo.WriteTo(buf[:n], from) //nolint:errcheck // a lost echo fails the test
		}
	}()
	inNamespace(t, nt.NamespacePath(0), func() { conn, err = net.ListenPacket("udp4", nt.Addr(0)+":0") })
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	to := &net.UDPAddr{IP: net.ParseIP(nt.Addr(1)), Port: 9}
	// rtts sends n datagrams at once and returns each one's round trip.
	rtts := func(n int) []time.Duration {
		t.Helper()
		sent := time.Now()
		for i := range n {
			if _, err := conn.WriteTo([]byte{byte(i)}, to); err != nil {
				t.Fatal(err)
			}
		}
		out := make([]time.Duration, n)
		conn.SetReadDeadline(time.Now().Add(10 * time.Second)) //nolint:errcheck // a socket's deadline
		buf := make([]byte, 64)
		for range n {
			k, _, err := conn.ReadFrom(buf)
			if err != nil || k != 1 {
				t.Fatalf("an echo did not come back: %v", err)
			}
			out[buf[0]] = time.Since(sent)
		}
		return out
	}

	const max = 300 * time.Millisecond
	stop, err := nt.Jitter(ctx, max)
	if err != nil {
		t.Fatal(err)
	}
	rules := Rules{}
	rules.Delay(1)
	if err := nt.Apply(ctx, rules); err != nil {
		t.Fatal(err)
	}
	got := rtts(20)
	// 20 draws from [0, 300ms]: all below 30 ms has odds of 1e-20.
	if slices.Max(got) < max/10 {
		t.Errorf("round trips %v: no packet was held", got)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// Stopped, with the rule still there: --queue-bypass lets packets go.
	rtts(5)
}
