package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"time"
)

// The handshake on a new ring connection: the dialing rank sends a hello
// naming the generation it forms, its global rank and its vector length;
// the listening rank answers with an ack. A connection of another
// generation (a rank that is behind or ahead of this one) is refused and
// the dialer tries again until both agree, or until its generation is
// aborted.

// helloMagic starts every hello: a stray client is dropped at once.
var helloMagic = [4]byte{'R', 'T', 'R', '1'}

type hello struct {
	Magic      [4]byte
	Generation int64
	Rank       int64
	Vector     int64
}

// Ack codes.
const (
	ackOK       uint8 = 1 // the right generation and rank: this is the ring's link
	ackRetry    uint8 = 2 // not (yet) the generation or rank the listener forms
	ackMismatch uint8 = 3 // the same ring, but another --vector: a setup error
)

type ack struct {
	Code   uint8
	Vector int64 // the listener's, to name the mismatch
}

// handshakeTimeout bounds the wait for a hello or an ack. A listener that
// is busy in an older generation answers only when that one is aborted,
// so the dialer gives up after this long and dials again.
const handshakeTimeout = 5 * time.Second

// dial backoff between refused or failed attempts: short, because a
// neighbour that starts listening a moment later is the common case.
const (
	minDialBackoff = 10 * time.Millisecond
	maxDialBackoff = 200 * time.Millisecond
)

// errRefused is an attempt the listener did not accept (yet).
var errRefused = errors.New("ringtrainer: the neighbour refused this generation's link")

// vectorMismatch is a ring whose ranks run with different --vector.
func vectorMismatch(peerRank int, peerVector, own int64) error {
	return &exitError{exitUsage, fmt.Errorf("rank %d runs with --vector %d and this rank with --vector %d: start every trainer of the job with the same --vector", peerRank, peerVector, own)}
}

// dialRight connects to the right neighbour at addr for the ring h names,
// retrying until the neighbour accepts or ctx ends.
func dialRight(ctx context.Context, addr string, rightRank int, h hello) (net.Conn, error) {
	backoff := minDialBackoff
	for {
		conn, err := dialOnce(ctx, addr, rightRank, h)
		if err == nil {
			return conn, nil
		}
		var ee *exitError
		if errors.As(err, &ee) {
			return nil, err
		}
		if !sleep(ctx, backoff) {
			return nil, ctx.Err()
		}
		backoff = min(2*backoff, maxDialBackoff)
	}
}

func dialOnce(ctx context.Context, addr string, rightRank int, h hello) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	// The deadline is set before the abort is armed, so the abort's
	// deadline in the past cannot be overwritten.
	conn.SetDeadline(time.Now().Add(handshakeTimeout))
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	a, err := exchangeHello(conn, h)
	if !stop() {
		err = ctx.Err()
	}
	switch {
	case err != nil:
	case a.Code == ackMismatch:
		err = vectorMismatch(rightRank, a.Vector, h.Vector)
	case a.Code != ackOK:
		err = errRefused
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	conn.SetDeadline(time.Time{})
	return conn, nil
}

func exchangeHello(conn net.Conn, h hello) (ack, error) {
	var a ack
	if err := binary.Write(conn, binary.BigEndian, h); err != nil {
		return a, fmt.Errorf("send hello: %w", err)
	}
	if err := binary.Read(conn, binary.BigEndian, &a); err != nil {
		return a, fmt.Errorf("read the answer to hello: %w", err)
	}
	return a, nil
}

// readHello reads a hello from a new connection.
func readHello(conn net.Conn) (hello, error) {
	var h hello
	if err := binary.Read(conn, binary.BigEndian, &h); err != nil {
		return h, err
	}
	if h.Magic != helloMagic {
		return h, fmt.Errorf("not a ringtrainer hello: %q", h.Magic[:])
	}
	return h, nil
}

func writeAck(conn net.Conn, a ack) error {
	conn.SetWriteDeadline(time.Now().Add(time.Second))
	defer conn.SetWriteDeadline(time.Time{})
	return binary.Write(conn, binary.BigEndian, a)
}

// sleep waits d or until ctx ends; it reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
