//go:build !linux

package gossip

import (
	"net"
	"net/netip"
)

// packetConn is the UDP socket's own ReadFrom and WriteTo where the raw
// system calls of udp_linux.go are not written.
type packetConn struct{ udp *net.UDPConn }

func newPacketConn(udp *net.UDPConn) (*packetConn, error) { return &packetConn{udp: udp}, nil }

func (c *packetConn) readFrom(b []byte) (int, net.Addr, error) { return c.udp.ReadFrom(b) }

func (c *packetConn) writeTo(b []byte, addr netip.AddrPort) error {
	_, err := c.udp.WriteToUDPAddrPort(b, addr)
	return err
}
