package main

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"time"
)

// dataListener accepts the left neighbour's links on this rank's data
// address for the life of the process: the address stays the same across
// generations, only the neighbour and the generation change. Hellos are
// read in the background and wait in incoming until the ring former looks
// at them, so a neighbour that is ahead waits for this rank to catch up.
type dataListener struct {
	addr     string
	ln       net.Listener
	log      *slog.Logger
	incoming chan pendingLink
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

// pendingLink is a connection that sent its hello.
type pendingLink struct {
	conn  net.Conn
	hello hello
	at    time.Time
}

// listenData listens on addr and accepts until close.
func listenData(addr string, log *slog.Logger) (*dataListener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &dataListener{addr: addr, ln: ln, log: log, incoming: make(chan pendingLink, 16), cancel: cancel}
	l.wg.Go(func() { l.accept(ctx) })
	return l, nil
}

func (l *dataListener) accept(ctx context.Context) {
	for {
		conn, err := l.ln.Accept()
		if err != nil {
			return // closed
		}
		l.wg.Go(func() { l.greet(ctx, conn) })
	}
}

// greet reads conn's hello and queues it for the ring former.
func (l *dataListener) greet(ctx context.Context, conn net.Conn) {
	conn.SetReadDeadline(time.Now().Add(handshakeTimeout))
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	h, err := readHello(conn)
	if !stop() || err != nil {
		l.log.Debug("dropping a data connection without a hello", "remote", conn.RemoteAddr(), "err", err)
		conn.Close()
		return
	}
	conn.SetReadDeadline(time.Time{})
	timer := time.NewTimer(handshakeTimeout)
	defer timer.Stop()
	select {
	case l.incoming <- pendingLink{conn: conn, hello: h, at: time.Now()}:
	case <-timer.C:
		conn.Close()
	case <-ctx.Done():
		conn.Close()
	}
}

// acceptLeft returns the link from leftRank for the ring own names,
// refusing links of other generations or ranks, until ctx ends.
func (l *dataListener) acceptLeft(ctx context.Context, own hello, leftRank int) (net.Conn, error) {
	for {
		var p pendingLink
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case p = <-l.incoming:
		}
		// The dialer gives up on its ack after handshakeTimeout and dials
		// again; a link it may have abandoned is refused, not used.
		stale := time.Since(p.at) > handshakeTimeout-time.Second
		code := ackRetry
		switch {
		case stale || p.hello.Generation != own.Generation || p.hello.Rank != int64(leftRank):
		case p.hello.Vector != own.Vector:
			code = ackMismatch
		default:
			code = ackOK
		}
		err := writeAck(p.conn, ack{Code: code, Vector: own.Vector})
		switch {
		case code == ackMismatch:
			p.conn.Close()
			return nil, vectorMismatch(leftRank, p.hello.Vector, own.Vector)
		case code != ackOK || err != nil:
			l.log.Debug("refused a data link", "from_rank", p.hello.Rank, "from_generation", p.hello.Generation, "stale", stale, "err", err)
			p.conn.Close()
			continue
		}
		return p.conn, nil
	}
}

// close stops accepting, closes the links nobody took, and waits for the
// background goroutines.
func (l *dataListener) close() {
	l.ln.Close()
	l.cancel()
	l.wg.Wait()
	for {
		select {
		case p := <-l.incoming:
			p.conn.Close()
		default:
			return
		}
	}
}
