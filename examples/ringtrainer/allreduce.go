package main

import (
	"encoding/binary"
	"io"
)

// allreduce combines v over the ring with op, in place: a reduce-scatter
// (world-1 rounds, after which this rank holds chunk rank+1 fully reduced)
// then an all-gather (world-1 rounds passing the reduced chunks on). Each
// round sends one chunk right while receiving one from the left, so a rank
// moves 2*(world-1)/world of the vector each way, whatever the world
// size. Every rank must call it with a vector of the same length.
func (rg *ring) allreduce(v []int64, op reduceOp) error {
	n := rg.world
	if n == 1 {
		return nil
	}
	chunk := func(i int) []int64 {
		i = ((i % n) + n) % n
		return v[i*len(v)/n : (i+1)*len(v)/n]
	}
	for s := range n - 1 {
		if err := rg.exchange(chunk(rg.rank-s), chunk(rg.rank-s-1), op); err != nil {
			return err
		}
	}
	for s := range n - 1 {
		if err := rg.exchange(chunk(rg.rank-s+1), chunk(rg.rank-s), nil); err != nil {
			return err
		}
	}
	return nil
}

// exchange sends out to the right neighbour while receiving in from the
// left one, then combines what came into in with op (nil: replace).
func (rg *ring) exchange(out, in []int64, op reduceOp) error {
	sb := grow(&rg.sendBuf, 8*len(out))
	for i, x := range out {
		binary.LittleEndian.PutUint64(sb[8*i:], uint64(x))
	}
	sent := make(chan error, 1)
	go func() {
		_, err := rg.right.Write(sb)
		if err != nil {
			rg.broke(&peerError{peer: rg.rightPeer, op: "send to", err: err})
		}
		sent <- err
	}()
	rb := grow(&rg.recvBuf, 8*len(in))
	_, rerr := io.ReadFull(rg.left, rb)
	if rerr != nil {
		rg.broke(&peerError{peer: rg.leftPeer, op: "receive from", err: rerr})
	}
	if werr := <-sent; rerr != nil || werr != nil {
		return rg.cause()
	}
	for i := range in {
		x := int64(binary.LittleEndian.Uint64(rb[8*i:]))
		if op != nil {
			x = op(in[i], x)
		}
		in[i] = x
	}
	return nil
}

// grow returns (*buf)[:n], reallocating only when it is too short.
func grow(buf *[]byte, n int) []byte {
	if cap(*buf) < n {
		*buf = make([]byte, n)
	}
	return (*buf)[:n]
}
