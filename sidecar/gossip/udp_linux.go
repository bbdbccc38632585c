package gossip

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"unsafe"
)

// packetConn sends and receives the gossip's UDP packets with raw system
// calls on the socket's non-blocking descriptor, waiting in the runtime's
// network poller when it has nothing to read (or no room to write).
//
// Why not net.UDPConn's ReadFrom and WriteTo: each of those enters the
// system call through the runtime's scheduler hooks, and the first system
// call after the process went idle wakes the runtime's monitor thread
// (sysmon), which then polls every 20 µs for a millisecond before it
// sleeps again. An idle sidecar sends and receives about twenty packets a
// second and little else, so those wake-ups were a third of its CPU (and
// two context switches each on a virtual machine). A send or receive on a
// non-blocking socket never blocks, which is what a raw system call needs.
type packetConn struct {
	udp   *net.UDPConn
	rc    syscall.RawConn
	inet6 bool // an IPv6 socket (bound to :: or to an IPv6 address): IPv4 peers go mapped
}

func newPacketConn(udp *net.UDPConn) (*packetConn, error) {
	rc, err := udp.SyscallConn()
	if err != nil {
		return nil, err
	}
	c := &packetConn{udp: udp, rc: rc}
	var sa syscall.Sockaddr
	if err := rc.Control(func(fd uintptr) { sa, err = syscall.Getsockname(int(fd)) }); err != nil {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("getsockname: %w", err)
	}
	_, c.inet6 = sa.(*syscall.SockaddrInet6)
	return c, nil
}

// readFrom reads one packet into b.
func (c *packetConn) readFrom(b []byte) (int, net.Addr, error) {
	var (
		n     int
		from  syscall.RawSockaddrAny
		errno syscall.Errno
	)
	err := c.rc.Read(func(fd uintptr) bool {
		for {
			size := uint32(unsafe.Sizeof(from))
			r, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)),
				0, uintptr(unsafe.Pointer(&from)), uintptr(unsafe.Pointer(&size)))
			switch e {
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false // wait in the poller
			}
			n, errno = int(r), e
			return true
		}
	})
	if err != nil {
		return 0, nil, err
	}
	if errno != 0 {
		return 0, nil, &net.OpError{Op: "read", Net: "udp", Source: c.udp.LocalAddr(), Err: errno}
	}
	return n, sockaddrToUDP(&from), nil
}

// writeTo sends b to addr.
func (c *packetConn) writeTo(b []byte, addr netip.AddrPort) error {
	sa, size, err := rawSockaddr(addr, c.inet6)
	if err != nil {
		return err
	}
	var errno syscall.Errno
	err = c.rc.Write(func(fd uintptr) bool {
		for {
			_, _, e := syscall.RawSyscall6(syscall.SYS_SENDTO, fd, uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)),
				0, uintptr(sa), uintptr(size))
			switch e {
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false // the send buffer is full: wait in the poller
			}
			errno = e
			return true
		}
	})
	if err != nil {
		return err
	}
	if errno != 0 {
		return &net.OpError{Op: "write", Net: "udp", Source: c.udp.LocalAddr(), Addr: net.UDPAddrFromAddrPort(addr), Err: errno}
	}
	return nil
}

// rawSockaddr encodes addr for sendto on a socket of the given family: an
// IPv4 address goes as one to an IPv4 socket, and mapped to an IPv6 one.
func rawSockaddr(addr netip.AddrPort, inet6 bool) (unsafe.Pointer, uintptr, error) {
	ip := addr.Addr().Unmap()
	if inet6 && ip.Is4() {
		ip = netip.AddrFrom16(ip.As16())
	}
	port := addr.Port()
	switch {
	case ip.Is4():
		sa := &syscall.RawSockaddrInet4{Family: syscall.AF_INET, Addr: ip.As4()}
		sa.Port = htons(port)
		return unsafe.Pointer(sa), unsafe.Sizeof(*sa), nil
	case ip.Is6():
		sa := &syscall.RawSockaddrInet6{Family: syscall.AF_INET6, Addr: ip.As16()}
		sa.Port = htons(port)
		return unsafe.Pointer(sa), unsafe.Sizeof(*sa), nil
	}
	return nil, 0, errors.New("not an IP address")
}

func sockaddrToUDP(sa *syscall.RawSockaddrAny) *net.UDPAddr {
	switch sa.Addr.Family {
	case syscall.AF_INET:
		in := (*syscall.RawSockaddrInet4)(unsafe.Pointer(sa))
		return &net.UDPAddr{IP: net.IP(in.Addr[:]).To16(), Port: int(htons(in.Port))}
	case syscall.AF_INET6:
		in := (*syscall.RawSockaddrInet6)(unsafe.Pointer(sa))
		ip := netip.AddrFrom16(in.Addr).Unmap()
		return &net.UDPAddr{IP: net.IP(ip.AsSlice()), Port: int(htons(in.Port))}
	}
	return &net.UDPAddr{}
}

// htons converts a port between host and network byte order, on hosts of
// either byte order: the value's bytes in memory, read big-endian.
func htons(p uint16) uint16 {
	b := (*[2]byte)(unsafe.Pointer(&p))
	return uint16(b[0])<<8 | uint16(b[1])
}
