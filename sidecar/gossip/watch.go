package gossip

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
)

// A watch is a TCP connection a member holds open to another member's
// gossip port and sends nothing on. When the watched process exits, for
// whatever reason (kill -9, an OOM kill, a crash), its kernel closes the
// connection at once: the watcher hears of the death in one round trip,
// where a probe would first have to reach the member (up to a few
// probe intervals at random) and then time out. A stopped process or a
// lost node closes nothing; the probes still find those.
//
// The watcher acts on a closed watch only by checking the member (see
// Check), so a watch that closes for another reason costs one ping.

// watchByte opens a watch stream: no memberlist message type, label or
// encryption header starts with it.
const watchByte = 0xfd

// maxWatched bounds the watch streams a member holds open for others:
// each member is watched by a few ring neighbours.
const maxWatched = 64

// Watch makes this member watch exactly the members named (its ring
// neighbours): it opens a watch to each it does not watch yet and closes
// those to members no longer named. A member never seen is skipped; call
// Watch again (it is cheap when nothing changed) after a generation or
// a join.
func (g *Gossip) Watch(names []string) {
	want := make(map[string]bool, len(names))
	for _, n := range names {
		if n != g.cfg.Name {
			want[n] = true
		}
	}
	g.wmu.Lock()
	defer g.wmu.Unlock()
	for name, w := range g.watching {
		if !want[name] {
			w.stop()
			delete(g.watching, name)
		}
	}
	for name := range want {
		if _, ok := g.watching[name]; ok {
			continue
		}
		p, ok := g.dlg.lastSeen(name)
		if !ok || !g.track() {
			continue
		}
		w := &watch{}
		g.watching[name] = w
		go func() {
			defer g.wg.Done()
			g.runWatch(name, p, w)
		}()
	}
}

// runWatch dials name, then waits for the connection to close and, unless
// the watch was stopped, reports it (as it does a refused dial).
func (g *Gossip) runWatch(name string, p peer, w *watch) {
	d := g.tr.dialer()
	d.Timeout = g.cfg.StreamTimeout
	conn, err := d.Dial("tcp", net.JoinHostPort(p.addr.String(), fmt.Sprint(p.port)))
	if err == nil {
		if !w.set(conn) {
			return // stopped while dialling
		}
		if _, err = conn.Write([]byte{watchByte}); err == nil {
			_, err = conn.Read(make([]byte, 1)) // returns when the peer's end closes
		}
		conn.Close()
	}
	g.wmu.Lock()
	stopped := w.stopped()
	if g.watching[name] == w {
		delete(g.watching, name) // the next Watch opens a new one
	}
	g.wmu.Unlock()
	if stopped {
		return
	}
	var op *net.OpError
	if err != nil && errors.As(err, &op) && op.Op == "dial" && !errors.Is(err, syscall.ECONNREFUSED) {
		return // unreachable or slow: the probes decide
	}
	g.log.Debug("gossip: watched member closed its connection", "member", name, "err", err)
	g.events.push(event{kind: memberClosed, name: name})
}

// stopWatches closes every watch this member holds; Close calls it.
func (g *Gossip) stopWatches() {
	g.wmu.Lock()
	defer g.wmu.Unlock()
	for name, w := range g.watching {
		w.stop()
		delete(g.watching, name)
	}
}

// watch is one watch connection, nil until dialled.
type watch struct {
	mu   sync.Mutex
	conn net.Conn
	done bool
}

// set records the dialled conn; false (and conn closed) if stopped.
func (w *watch) set(conn net.Conn) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		conn.Close()
		return false
	}
	w.conn = conn
	return true
}

func (w *watch) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done = true
	if w.conn != nil {
		w.conn.Close()
	}
}

func (w *watch) stopped() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.done
}
