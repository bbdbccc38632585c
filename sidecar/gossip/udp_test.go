package gossip

import (
	"bytes"
	"net"
	"net/netip"
	"os"
	"testing"
)

// TestPacketConnRoundTrips sends a packet each way between two sockets of
// each family the transport binds: IPv4, IPv6, and the dual-stack socket a
// bind to 0.0.0.0 gets, which must reach an IPv4 peer through a mapped
// address and name the sender as IPv4.
func TestPacketConnRoundTrips(t *testing.T) {
	tests := []struct{ name, bind, peer string }{
		{"IPv4", "127.0.0.1", "127.0.0.1"},
		{"IPv6", "::1", "::1"},
		{"every address to IPv4", "0.0.0.0", "127.0.0.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := listenPacket(t, tt.bind)
			b := listenPacket(t, tt.peer)
			port := func(c *packetConn) uint16 { return uint16(c.udp.LocalAddr().(*net.UDPAddr).Port) }
			to := netip.AddrPortFrom(netip.MustParseAddr(tt.peer), port(b))
			if err := a.writeTo([]byte("ping"), to); err != nil {
				t.Fatalf("write to %s: %v", to, err)
			}
			buf := make([]byte, 64)
			n, from, err := b.readFrom(buf)
			if err != nil || !bytes.Equal(buf[:n], []byte("ping")) {
				t.Fatalf("read %q, %v; want ping", buf[:n], err)
			}
			ua := from.(*net.UDPAddr)
			if ua.Port != int(port(a)) || !ua.IP.Equal(net.ParseIP(tt.peer)) {
				t.Fatalf("packet from %s; want %s port %d", from, tt.peer, port(a))
			}
			back, _ := netip.ParseAddrPort(from.String())
			if err := b.writeTo([]byte("ack"), back); err != nil {
				t.Fatalf("reply to %s: %v", back, err)
			}
			if n, _, err := a.readFrom(buf); err != nil || string(buf[:n]) != "ack" {
				t.Fatalf("read %q, %v; want ack", buf[:n], err)
			}
		})
	}
}

func listenPacket(t *testing.T, ip string) *packetConn {
	t.Helper()
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(ip)})
	if err != nil && os.Getenv("CI") != "true" {
		t.Skipf("no %s here: %v", ip, err)
	} else if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { udp.Close() })
	c, err := newPacketConn(udp)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
