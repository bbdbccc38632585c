package sockreset

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The tests reset every connection of this network namespace to their peer
// addresses, so they use loopback addresses of their own, away from the
// 127.0.0.2 upwards that process tests and benchmarks on the same host give
// their members.
const (
	clientAddr    = "127.86.0.1"
	deadAddr      = "127.86.0.2"
	bystanderAddr = "127.86.0.3"
	mappedAddr    = "127.86.0.6"
	idleAddr      = "127.86.0.7"
)

// promptly bounds how long a destroyed connection may take to fail its
// blocked read: the kernel wakes it at once.
const promptly = 5 * time.Second

// resetOrSkip calls Reset and stops the test where this machine cannot
// destroy sockets: a failure in CI, which must be able to, a skip elsewhere.
func resetOrSkip(t *testing.T, peer net.IP) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), promptly)
	defer cancel()
	n, err := New(slog.New(slog.DiscardHandler)).Reset(ctx, peer)
	if errors.Is(err, ErrUnsupported) {
		why := "run as root (CAP_NET_ADMIN) to test it"
		if errors.Is(err, unix.EOPNOTSUPP) {
			why = "the kernel needs CONFIG_INET_DIAG_DESTROY=y"
		}
		if os.Getenv("CI") == "true" {
			t.Fatalf("cannot destroy sockets: %v; %s", err, why)
		}
		t.Skipf("cannot destroy sockets: %v; %s", err, why)
	}
	if err != nil {
		t.Fatalf("Reset(%v): %v", peer, err)
	}
	return n
}

// connect dials addr from local and returns both ends.
func connect(t *testing.T, ln net.Listener, local string) (client, server net.Conn) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}, Timeout: promptly}
	client, err := d.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close() })
	return client, server
}

func listen(t *testing.T, addr string) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// blockedRead starts a read on conn, which blocks until data or an error,
// and returns where its error will arrive.
func blockedRead(conn net.Conn) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := conn.Read(make([]byte, 1))
		done <- err
	}()
	return done
}

func awaitAborted(t *testing.T, readErr <-chan error, what string) {
	t.Helper()
	select {
	case err := <-readErr:
		if !errors.Is(err, unix.ECONNABORTED) {
			t.Errorf("%s: blocked read returned %v, want ECONNABORTED", what, err)
		}
	case <-time.After(promptly):
		t.Fatalf("%s: blocked read still blocked %v after the reset", what, promptly)
	}
}

// echo checks that client and server still talk both ways.
func echo(t *testing.T, client, server net.Conn) {
	t.Helper()
	deadline := time.Now().Add(promptly)
	client.SetDeadline(deadline)
	server.SetDeadline(deadline)
	buf := make([]byte, 4)
	if _, err := client.Write([]byte("ping")); err != nil {
		t.Fatalf("write to the bystander: %v", err)
	}
	if _, err := io.ReadFull(server, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("bystander read %q, %v", buf, err)
	}
	if _, err := server.Write([]byte("pong")); err != nil {
		t.Fatalf("bystander write: %v", err)
	}
	if _, err := io.ReadFull(client, buf); err != nil || string(buf) != "pong" {
		t.Fatalf("read from the bystander %q, %v", buf, err)
	}
}

func TestResetAbortsConnectionsToThePeerAndNoOthers(t *testing.T) {
	dead := listen(t, net.JoinHostPort(deadAddr, "0"))
	bystander := listen(t, net.JoinHostPort(bystanderAddr, "0"))
	toDead, _ := connect(t, dead, clientAddr)
	toBystander, fromBystander := connect(t, bystander, clientAddr)
	readErr := blockedRead(toDead)

	if n := resetOrSkip(t, net.ParseIP(deadAddr)); n < 1 {
		t.Fatalf("destroyed %d sockets, want at least 1", n)
	}
	awaitAborted(t, readErr, "connection to the dead peer")
	echo(t, toBystander, fromBystander)
}

// The kernel filters a dump to the peer's sockets: a host's others (thousands
// where many workers share its network namespace) never reach the sidecar.
func TestTheKernelListsThePeersSocketsAlone(t *testing.T) {
	dead := listen(t, net.JoinHostPort(deadAddr, "0"))
	bystander := listen(t, net.JoinHostPort(bystanderAddr, "0"))
	connect(t, dead, clientAddr)
	connect(t, bystander, clientAddr)
	connect(t, bystander, clientAddr)
	c, err := openDiag(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	socks, err := c.dump(unix.AF_INET, net.ParseIP(deadAddr))
	if err != nil {
		t.Fatal(err)
	}
	if len(socks) != 1 || !socks[0].remoteIs(net.ParseIP(deadAddr)) {
		t.Fatalf("the dump for %s listed %v, want the one connection to it", deadAddr, socks)
	}
}

func TestResetAbortsIPv4MappedConnections(t *testing.T) {
	// A dual-stack listener accepts IPv4 connections on an IPv6 socket, whose
	// remote address is IPv4-mapped (::ffff:127.86.0.6).
	ln := listen(t, ":0")
	if ln.Addr().(*net.TCPAddr).IP.To4() != nil {
		t.Skip("no dual-stack listener here")
	}
	port := ln.Addr().(*net.TCPAddr).Port
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(mappedAddr)}, Timeout: promptly}
	client, err := d.Dial("tcp", net.JoinHostPort(clientAddr, strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	fromPeer, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer fromPeer.Close()
	readErr := blockedRead(fromPeer)

	if n := resetOrSkip(t, net.ParseIP(mappedAddr)); n != 1 {
		t.Fatalf("destroyed %d sockets, want 1 (the accepted one)", n)
	}
	awaitAborted(t, readErr, "accepted connection from the dead peer")
}

func TestResetWithNoConnectionsDestroysNothing(t *testing.T) {
	if n := resetOrSkip(t, net.ParseIP(idleAddr)); n != 0 {
		t.Fatalf("destroyed %d sockets, want 0", n)
	}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		name            string
		err             error
		wantUnsupported bool
		wantMention     string
	}{
		{"no permission", unix.EPERM, true, "CAP_NET_ADMIN"},
		{"access denied", unix.EACCES, true, "CAP_NET_ADMIN"},
		{"no destroy in the kernel", unix.EOPNOTSUPP, true, "CONFIG_INET_DIAG_DESTROY"},
		{"no sock_diag in the kernel", unix.EPROTONOSUPPORT, true, "CONFIG_INET_DIAG"},
		{"anything else", unix.EBADF, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := classify(tt.err)
			if errors.Is(err, ErrUnsupported) != tt.wantUnsupported || !errors.Is(err, tt.err) {
				t.Fatalf("classify(%v) = %v", tt.err, err)
			}
			if tt.wantMention != "" && !strings.Contains(err.Error(), tt.wantMention) {
				t.Fatalf("classify(%v) = %q, does not mention %s", tt.err, err, tt.wantMention)
			}
		})
	}
}
