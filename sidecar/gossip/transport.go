package gossip

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/hashicorp/memberlist"
)

// transport is memberlist's NetTransport on one address, but for how it
// receives a packet: NetTransport allocates a fresh 64 KiB buffer for each
// one, and at five probes a second in and out an idle sidecar allocated
// 0.7 MB/s, which set the pace of its garbage collector (a cycle every 4 s,
// a tenth of its idle CPU). memberlist keeps the packet after the read
// returns (it queues some messages for another goroutine), so the buffer
// cannot be reused; the packet is copied out of one reused read buffer
// into a slice of its own size instead, a few hundred bytes.
type transport struct {
	log      *slog.Logger
	local    net.IP // the bound address, or nil when bound to every interface
	tcp      *net.TCPListener
	udp      *net.UDPConn
	pc       *packetConn // udp's reads and writes (see udp_linux.go)
	packetCh chan *memberlist.Packet
	streamCh chan net.Conn
	closed   atomic.Bool
	done     chan struct{} // closed by Shutdown

	hmu  sync.Mutex // guards held
	held map[net.Conn]bool
	wg   sync.WaitGroup
}

var _ memberlist.Transport = (*transport)(nil)

// maxPacket is the largest UDP payload memberlist sends (its
// UDPBufferSize default is 1400; a push/pull goes over TCP).
const maxPacket = 65536

// udpRecvBuf is the socket receive buffer asked for, as NetTransport asks:
// a burst of packets while the reader is descheduled must not be dropped.
const udpRecvBuf = 2 << 20

// listen binds the TCP and UDP listeners on addr:port (port 0: a free
// one, the same for both) and starts reading.
func listen(addr string, port int, log *slog.Logger) (*transport, error) {
	ip := net.ParseIP(addr)
	if ip == nil {
		return nil, fmt.Errorf("bind address %q is not an IP address", addr)
	}
	tcp, err := net.ListenTCP("tcp", &net.TCPAddr{IP: ip, Port: port})
	if err != nil {
		return nil, fmt.Errorf("listen TCP on %s port %d: %w", addr, port, err)
	}
	if port == 0 {
		port = tcp.Addr().(*net.TCPAddr).Port
	}
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: ip, Port: port})
	if err != nil {
		tcp.Close()
		return nil, fmt.Errorf("listen UDP on %s port %d: %w", addr, port, err)
	}
	for size := udpRecvBuf; size > 0; size /= 2 {
		if udp.SetReadBuffer(size) == nil {
			break
		}
	}
	pc, err := newPacketConn(udp)
	if err != nil {
		tcp.Close()
		udp.Close()
		return nil, fmt.Errorf("UDP socket on %s port %d: %w", addr, port, err)
	}
	t := &transport{
		log:      log,
		tcp:      tcp,
		udp:      udp,
		pc:       pc,
		packetCh: make(chan *memberlist.Packet),
		streamCh: make(chan net.Conn),
		done:     make(chan struct{}),
		held:     map[net.Conn]bool{},
	}
	if !ip.IsUnspecified() {
		t.local = ip
	}
	t.wg.Add(2)
	go t.acceptStreams()
	go t.readPackets()
	return t, nil
}

// port returns the bound port.
func (t *transport) port() int { return t.tcp.Addr().(*net.TCPAddr).Port }

// FinalAdvertiseAddr is memberlist's: the address is resolved by Start
// (see advertiseIP), so it is only parsed here.
func (t *transport) FinalAdvertiseAddr(ip string, port int) (net.IP, int, error) {
	if ip == "" {
		return nil, 0, errors.New("no advertise address")
	}
	addr := net.ParseIP(ip)
	if addr == nil {
		return nil, 0, fmt.Errorf("advertise address %q is not an IP address", ip)
	}
	if v4 := addr.To4(); v4 != nil {
		addr = v4
	}
	if port == 0 {
		port = t.port()
	}
	return addr, port, nil
}

// WriteTo is memberlist's: one packet to addr (host:port).
func (t *transport) WriteTo(b []byte, addr string) (time.Time, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil { // a name, not an address
		ua, rerr := net.ResolveUDPAddr("udp", addr)
		if rerr != nil {
			return time.Time{}, rerr
		}
		ap = ua.AddrPort()
	}
	return time.Now(), t.pc.writeTo(b, ap)
}

// PacketCh is memberlist's.
func (t *transport) PacketCh() <-chan *memberlist.Packet { return t.packetCh }

// DialTimeout is memberlist's: a TCP stream to addr, from the bound
// address when there is one, so a stream comes from the address this
// member advertises, as its packets do.
func (t *transport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	d := t.dialer()
	d.Timeout = timeout
	return d.Dial("tcp", addr)
}

// dialer dials TCP from the bound address, if any.
func (t *transport) dialer() net.Dialer {
	var d net.Dialer
	if t.local != nil {
		d.LocalAddr = &net.TCPAddr{IP: t.local}
	}
	return d
}

// StreamCh is memberlist's.
func (t *transport) StreamCh() <-chan net.Conn { return t.streamCh }

// Shutdown is memberlist's: it closes the listeners and waits for the
// readers. memberlist stops reading the channels first.
func (t *transport) Shutdown() error {
	if t.closed.Swap(true) {
		return nil
	}
	close(t.done)
	t.tcp.Close()
	t.udp.Close()
	t.hmu.Lock()
	for conn := range t.held {
		conn.Close()
	}
	t.hmu.Unlock()
	t.wg.Wait()
	return nil
}

func (t *transport) acceptStreams() {
	defer t.wg.Done()
	// Out of descriptors, most likely: back off as NetTransport does.
	bo := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(5*time.Millisecond), backoff.WithMaxInterval(time.Second),
		backoff.WithMultiplier(2), backoff.WithRandomizationFactor(0), backoff.WithMaxElapsedTime(0))
	for {
		conn, err := t.tcp.AcceptTCP()
		if err != nil {
			if t.closed.Load() {
				return
			}
			delay := bo.NextBackOff()
			t.log.Warn("gossip: accepting a TCP connection failed", "err", err, "retry_in", delay)
			time.Sleep(delay)
			continue
		}
		bo.Reset()
		t.wg.Go(func() { t.handOver(conn) })
	}
}

// firstByteWait bounds how long an accepted stream may stay silent:
// memberlist's dialers and watchers write at once.
const firstByteWait = 5 * time.Second

// handOver reads conn's first byte: a watch (see watch.go) is held open
// until its watcher closes it; any other stream goes to memberlist, the
// byte put back. A stream closed before its first byte (another member's
// Check) is dropped.
func (t *transport) handOver(conn *net.TCPConn) {
	r := bufio.NewReaderSize(conn, 16)
	conn.SetReadDeadline(time.Now().Add(firstByteWait))
	first, err := r.Peek(1)
	if err != nil {
		conn.Close()
		return
	}
	conn.SetReadDeadline(time.Time{})
	if first[0] == watchByte {
		t.hold(conn)
		return
	}
	select {
	case t.streamCh <- &peekedConn{TCPConn: conn, r: r}:
	case <-t.done: // memberlist reads no more
		conn.Close()
	}
}

// hold keeps a watch open until its watcher closes it or Shutdown does;
// when maxWatched are held, the new one is refused (closed), which its
// watcher takes for a reason to check this member, and finds it alive.
func (t *transport) hold(conn *net.TCPConn) {
	t.hmu.Lock()
	if len(t.held) >= maxWatched || t.closed.Load() {
		t.hmu.Unlock()
		conn.Close()
		return
	}
	t.held[conn] = true
	t.hmu.Unlock()
	io.Copy(io.Discard, conn) //nolint:errcheck // any end of the stream ends the watch
	t.hmu.Lock()
	delete(t.held, conn)
	t.hmu.Unlock()
	conn.Close()
}

// peekedConn is a stream whose first bytes were read into r.
type peekedConn struct {
	*net.TCPConn
	r *bufio.Reader
}

func (c *peekedConn) Read(b []byte) (int, error) { return c.r.Read(b) }

func (t *transport) readPackets() {
	defer t.wg.Done()
	buf := make([]byte, maxPacket)
	for {
		n, addr, err := t.pc.readFrom(buf)
		now := time.Now()
		if err != nil {
			if t.closed.Load() {
				return
			}
			t.log.Warn("gossip: reading a UDP packet failed", "err", err)
			continue
		}
		if n == 0 {
			continue
		}
		t.packetCh <- &memberlist.Packet{Buf: append([]byte(nil), buf[:n]...), From: addr, Timestamp: now}
	}
}
