//go:build linux

package sockreset

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// The sock_diag wire format, from linux/inet_diag.h.
const (
	sizeofSockID  = 48                    // struct inet_diag_sockid
	sizeofDiagReq = 8 + sizeofSockID      // struct inet_diag_req_v2
	sizeofDiagMsg = 4 + sizeofSockID + 20 // struct inet_diag_msg

	inetDiagReqBytecode = 1 // INET_DIAG_REQ_BYTECODE, the request's filter
	inetDiagBCDCond     = 8 // INET_DIAG_BC_D_COND: the remote address matches
	sizeofBCOp          = 4 // struct inet_diag_bc_op
	sizeofHostcond      = 8 // struct inet_diag_hostcond, before its address

	tcpTimeWait = 6  // TCP_TIME_WAIT
	tcpListen   = 10 // TCP_LISTEN
	tcpMaxState = 12 // TCP_NEW_SYN_RECV, the last state with a peer

	// resetStates selects every state that has a peer and an owner that
	// may be waiting on it.
	resetStates = uint32(1<<(tcpMaxState+1)-2) &^ (1<<tcpListen | 1<<tcpTimeWait)

	// recvBuffer holds one batch of a dump; the kernel fills at most 32 KiB.
	recvBuffer = 64 << 10
	// defaultTimeout bounds (a duration) each wait for the kernel's answer
	// when ctx has no deadline. The kernel answers at once; this only keeps
	// a wedged netlink socket from hanging the caller.
	defaultTimeout = 5 * time.Second
)

var native = binary.NativeEndian

// destroyTCP aborts this namespace's TCP sockets to peer over sock_diag.
func destroyTCP(ctx context.Context, peer net.IP) (int, error) {
	c, err := openDiag(ctx)
	if err != nil {
		return 0, err
	}
	defer c.close()
	destroyed := 0
	var errs []error
	for _, family := range familiesFor(peer) {
		socks, err := c.dump(family, peer)
		if err != nil {
			if family == unix.AF_INET6 && peer.To4() != nil &&
				(errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EAFNOSUPPORT)) {
				continue // no IPv6 here, so no IPv4-mapped sockets either
			}
			return destroyed, fmt.Errorf("sockreset: list TCP sockets: %w", classify(err))
		}
		for _, s := range socks {
			if !s.remoteIs(peer) {
				continue
			}
			if err := ctx.Err(); err != nil {
				return destroyed, fmt.Errorf("sockreset: reset %s: %w", peer, err)
			}
			err := c.destroy(s)
			switch {
			case err == nil:
				destroyed++
			case errors.Is(err, unix.ENOENT): // closed in the meantime
			default:
				err = fmt.Errorf("destroy %s: %w", s, classify(err))
				if errors.Is(err, ErrUnsupported) {
					return destroyed, fmt.Errorf("sockreset: %w", err)
				}
				errs = append(errs, err)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return destroyed, fmt.Errorf("sockreset: reset %s: %w", peer, err)
	}
	return destroyed, nil
}

// familiesFor lists the socket families that can reach peer: an IPv4 peer is
// also reached by IPv6 sockets through its IPv4-mapped address (a Go or
// dual-stack listener accepts IPv4 connections on an IPv6 socket).
func familiesFor(peer net.IP) []uint8 {
	if peer.To4() != nil {
		return []uint8{unix.AF_INET, unix.AF_INET6}
	}
	return []uint8{unix.AF_INET6}
}

// classify marks the errors that mean destroying is impossible here.
func classify(err error) error {
	switch {
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		return fmt.Errorf("%w: destroying a socket needs CAP_NET_ADMIN in this network namespace: %w", ErrUnsupported, err)
	case errors.Is(err, unix.EOPNOTSUPP):
		return fmt.Errorf("%w: the kernel was built without CONFIG_INET_DIAG_DESTROY: %w", ErrUnsupported, err)
	case errors.Is(err, unix.EPROTONOSUPPORT):
		return fmt.Errorf("%w: the kernel was built without CONFIG_INET_DIAG: %w", ErrUnsupported, err)
	}
	return err
}

// socket is one entry of a sock_diag dump.
type socket struct {
	family uint8
	state  uint8
	id     sockID
}

// sockID is struct inet_diag_sockid; for IPv4 only the first 4 bytes of
// src and dst are used.
type sockID struct {
	sport, dport uint16
	src, dst     [16]byte
	ifindex      uint32
	cookie       [2]uint32
}

func (id sockID) put(b []byte) {
	binary.BigEndian.PutUint16(b[0:], id.sport)
	binary.BigEndian.PutUint16(b[2:], id.dport)
	copy(b[4:20], id.src[:])
	copy(b[20:36], id.dst[:])
	native.PutUint32(b[36:], id.ifindex)
	native.PutUint32(b[40:], id.cookie[0])
	native.PutUint32(b[44:], id.cookie[1])
}

func parseSockID(b []byte) sockID {
	var id sockID
	id.sport = binary.BigEndian.Uint16(b[0:])
	id.dport = binary.BigEndian.Uint16(b[2:])
	copy(id.src[:], b[4:20])
	copy(id.dst[:], b[20:36])
	id.ifindex = native.Uint32(b[36:])
	id.cookie = [2]uint32{native.Uint32(b[40:]), native.Uint32(b[44:])}
	return id
}

func (s socket) ip(addr [16]byte) net.IP {
	if s.family == unix.AF_INET {
		return net.IP(addr[:4])
	}
	return net.IP(addr[:])
}

// remoteIs matches IPv4, IPv6 and IPv4-mapped IPv6 remote addresses.
func (s socket) remoteIs(peer net.IP) bool { return s.ip(s.id.dst).Equal(peer) }

func (s socket) String() string {
	return net.JoinHostPort(s.ip(s.id.src).String(), strconv.Itoa(int(s.id.sport))) + "->" +
		net.JoinHostPort(s.ip(s.id.dst).String(), strconv.Itoa(int(s.id.dport)))
}

// diagConn is a NETLINK_SOCK_DIAG socket, used for one dump at a time and
// the destroy requests that follow.
type diagConn struct {
	fd  int
	seq uint32
	buf []byte
}

func openDiag(ctx context.Context) (*diagConn, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return nil, fmt.Errorf("sockreset: open sock_diag: %w", classify(err))
	}
	timeout := defaultTimeout
	if deadline, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(deadline), time.Millisecond)
	}
	tv := unix.NsecToTimeval(timeout.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("sockreset: set sock_diag timeout: %w", err)
	}
	return &diagConn{fd: fd, buf: make([]byte, recvBuffer)}, nil
}

func (c *diagConn) close() { unix.Close(c.fd) }

// dump lists the TCP sockets of family in resetStates whose remote address
// is peer. The kernel filters them (peerFilter): a host's other sockets,
// thousands where many workers share its network namespace, never cross
// into this process.
func (c *diagConn) dump(family uint8, peer net.IP) ([]socket, error) {
	seq, err := c.send(unix.SOCK_DIAG_BY_FAMILY, unix.NLM_F_DUMP, family, resetStates, sockID{}, peerFilter(peer)...)
	if err != nil {
		return nil, err
	}
	var socks []socket
	err = c.receive(seq, func(typ uint16, payload []byte) (bool, error) {
		switch typ {
		case unix.NLMSG_DONE:
			return true, nil
		case unix.SOCK_DIAG_BY_FAMILY:
			if len(payload) < sizeofDiagMsg {
				return false, fmt.Errorf("sock_diag answer of %d bytes, want %d", len(payload), sizeofDiagMsg)
			}
			socks = append(socks, socket{family: payload[0], state: payload[1], id: parseSockID(payload[4:])})
		}
		return false, nil
	})
	return socks, err
}

// destroy asks the kernel to abort s and waits for its answer.
func (c *diagConn) destroy(s socket) error {
	seq, err := c.send(unix.SOCK_DESTROY, unix.NLM_F_ACK, s.family, resetStates, s.id)
	if err != nil {
		return err
	}
	return c.receive(seq, func(uint16, []byte) (bool, error) { return false, nil })
}

// peerFilter is the INET_DIAG_REQ_BYTECODE attribute that keeps the sockets
// whose remote address is peer, on any port: one condition, whose "yes"
// ends the program (keep) and whose "no" jumps past its end (drop). An
// IPv4 condition matches IPv4-mapped IPv6 sockets too.
func peerFilter(peer net.IP) []byte {
	family, addr := uint8(unix.AF_INET6), peer.To16()
	if v4 := peer.To4(); v4 != nil {
		family, addr = unix.AF_INET, v4
	}
	n := sizeofBCOp + sizeofHostcond + len(addr)
	b := make([]byte, unix.NLA_HDRLEN+n)
	native.PutUint16(b[0:], uint16(len(b)))
	native.PutUint16(b[2:], inetDiagReqBytecode)
	op := b[unix.NLA_HDRLEN:]
	op[0] = inetDiagBCDCond
	op[1] = uint8(n)                      // yes: to the end, kept
	native.PutUint16(op[2:], uint16(n+4)) // no: past the end, dropped
	cond := op[sizeofBCOp:]
	cond[0] = family
	cond[1] = uint8(len(addr) * 8)         // the prefix: the whole address
	native.PutUint32(cond[4:], ^uint32(0)) // port -1: any
	copy(cond[sizeofHostcond:], addr)
	return b
}

// send writes one request, an nlmsghdr, an inet_diag_req_v2 and attrs
// (netlink attributes), and returns its sequence number.
func (c *diagConn) send(typ, flags uint16, family uint8, states uint32, id sockID, attrs ...byte) (uint32, error) {
	c.seq++
	b := make([]byte, unix.NLMSG_HDRLEN+sizeofDiagReq, unix.NLMSG_HDRLEN+sizeofDiagReq+len(attrs))
	native.PutUint32(b[0:], uint32(len(b)))
	native.PutUint16(b[4:], typ)
	native.PutUint16(b[6:], flags|unix.NLM_F_REQUEST)
	native.PutUint32(b[8:], c.seq)
	req := b[unix.NLMSG_HDRLEN:]
	req[0] = family
	req[1] = unix.IPPROTO_TCP
	native.PutUint32(req[4:], states)
	id.put(req[8:])
	b = append(b, attrs...)
	native.PutUint32(b[0:], uint32(len(b)))
	if err := unix.Sendto(c.fd, b, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, fmt.Errorf("send to sock_diag: %w", err)
	}
	return c.seq, nil
}

// receive reads the answers to request seq, passing each message but errors
// and acknowledgements to handle, until handle says done, an NLMSG_ERROR
// arrives (an error number of 0 is the acknowledgement and ends without
// error), or the wait times out.
func (c *diagConn) receive(seq uint32, handle func(typ uint16, payload []byte) (done bool, err error)) error {
	for {
		n, _, err := unix.Recvfrom(c.fd, c.buf, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if errors.Is(err, unix.EAGAIN) {
			return fmt.Errorf("sock_diag did not answer in time: %w", err)
		}
		if err != nil {
			return fmt.Errorf("receive from sock_diag: %w", err)
		}
		for b := c.buf[:n]; len(b) >= unix.NLMSG_HDRLEN; {
			l := int(native.Uint32(b[0:]))
			if l < unix.NLMSG_HDRLEN || l > len(b) {
				return fmt.Errorf("malformed sock_diag message of length %d in %d bytes", l, len(b))
			}
			typ, mseq, payload := native.Uint16(b[4:]), native.Uint32(b[8:]), b[unix.NLMSG_HDRLEN:l]
			b = b[min(nlmAlign(l), len(b)):]
			if mseq != seq {
				continue // a late answer to an earlier request
			}
			if typ == unix.NLMSG_ERROR {
				if len(payload) < 4 {
					return errors.New("truncated sock_diag error message")
				}
				if errno := -int32(native.Uint32(payload)); errno != 0 {
					return unix.Errno(errno)
				}
				return nil
			}
			done, err := handle(typ, payload)
			if err != nil || done {
				return err
			}
		}
	}
}

func nlmAlign(n int) int { return (n + unix.NLMSG_ALIGNTO - 1) &^ (unix.NLMSG_ALIGNTO - 1) }
