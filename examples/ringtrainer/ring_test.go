package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/ringside/ringside/coordinator/record"
	"github.com/ringside/ringside/trainer/api"
)

// formRings forms one generation's ring in-process: members members of
// slots slots each, member i on 127.0.0.(10+i), one trainer per rank.
func formRings(t *testing.T, members, slots, vector int) ([]*trainer, []*ring) {
	t.Helper()
	port := freePort(t)
	world := members * slots
	var ranked []record.RankedMember
	for i := range members {
		ranked = append(ranked, record.RankedMember{ID: fmt.Sprintf("m%d", i), Addr: fmt.Sprintf("127.0.0.%d", 10+i), Rank: i * slots, Slots: slots})
	}
	trainers := make([]*trainer, world)
	rings := make([]*ring, world)
	errs := make([]error, world)
	ctx, cancel := context.WithTimeout(context.Background(), awaitTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for rank := range world {
		m := ranked[rank/slots]
		cfg := DefaultConfig()
		cfg.LocalRank, cfg.Port, cfg.Vector = rank%slots, port, vector
		tr := newTrainer(cfg, nil, newOutput(io.Discard), slog.New(slog.DiscardHandler))
		trainers[rank] = tr
		t.Cleanup(tr.closeListener)
		r := &api.Rendezvous{Generation: 7, Member: m.ID, State: record.StateActive, Rank: m.Rank,
			LocalWorldSize: slots, WorldSize: world, Members: ranked}
		wg.Go(func() { rings[rank], errs[rank] = tr.formRing(ctx, r) })
	}
	wg.Wait()
	for rank, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: form the ring: %v", rank, err)
		}
		t.Cleanup(rings[rank].close)
	}
	return trainers, rings
}

// allreduceAll runs one all-reduce on every rank at once.
func allreduceAll(rings []*ring, vs [][]int64, op reduceOp) []error {
	errs := make([]error, len(rings))
	var wg sync.WaitGroup
	for i, rg := range rings {
		wg.Go(func() { errs[i] = rg.allreduce(vs[i], op) })
	}
	wg.Wait()
	return errs
}

func TestRingAllReduceSumsExactly(t *testing.T) {
	tests := []struct {
		name                   string
		members, slots, vector int
	}{
		{"one rank needs no links", 1, 1, 16},
		{"two ranks", 2, 1, 4096},
		{"three ranks with a vector shorter than the ring", 3, 1, 2},
		{"five ranks with uneven chunks", 5, 1, 1001},
		{"two members of two slots each", 2, 2, 64},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, rings := formRings(t, tt.members, tt.slots, tt.vector)
			for step := int64(1); step <= 3; step++ {
				vs := make([][]int64, len(rings))
				for i, rg := range rings {
					if rg.rank != i {
						t.Fatalf("ring %d has rank %d", i, rg.rank)
					}
					vs[i] = make([]int64, tt.vector)
					fill(vs[i], step, rg.rank)
				}
				for i, err := range allreduceAll(rings, vs, opSum) {
					if err != nil {
						t.Fatalf("step %d, rank %d: %v", step, i, err)
					}
					if j := verify(vs[i], step, len(rings)); j >= 0 {
						t.Fatalf("step %d, rank %d: element %d is %d, want %d", step, i, j, vs[i][j], expected(step, len(rings), j))
					}
				}
			}
		})
	}
}

func TestRingAgreesOnTheLastCompletedStep(t *testing.T) {
	_, rings := formRings(t, 4, 1, 8)
	completed := []int64{3, 7, 5, 0}
	vs := make([][]int64, len(rings))
	for i := range rings {
		vs[i] = []int64{completed[i]}
	}
	for i, err := range allreduceAll(rings, vs, opMax) {
		if err != nil {
			t.Fatal(err)
		}
		if vs[i][0] != 7 {
			t.Errorf("rank %d goes on from step %d, want 7", i, vs[i][0])
		}
	}
}

// TestNewGenerationAbortsABlockedStep: rank 0 waits for a peer that never
// sends; the announcement of a newer generation ends its step at once.
func TestNewGenerationAbortsABlockedStep(t *testing.T) {
	trainers, rings := formRings(t, 2, 1, 1<<16)
	tr, rg := trainers[0], rings[0]
	gctx, leave := tr.gens.enter(context.Background(), rg.generation)
	defer leave()
	stop := context.AfterFunc(gctx, rg.close)
	defer stop()

	done := make(chan error, 1)
	go func() { done <- rg.allreduce(make([]int64, 1<<16), opSum) }()
	tr.gens.saw(rg.generation + 1)
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the step completed without its peer")
		}
		if !errors.Is(context.Cause(gctx), errNewGeneration) {
			t.Errorf("generation context ended with %v, want errNewGeneration", context.Cause(gctx))
		}
	case <-time.After(awaitTimeout):
		t.Fatal("the step was not aborted")
	}
}

// TestDeadNeighbourIsNamed: when a rank's links close mid-step, the rank
// it sends to reports that rank as the peer that broke the ring.
func TestDeadNeighbourIsNamed(t *testing.T) {
	_, rings := formRings(t, 3, 1, 256)
	rings[1].close()
	vs := [][]int64{make([]int64, 256), make([]int64, 256)}
	errs := allreduceAll([]*ring{rings[0], rings[2]}, vs, opSum)
	var pe *peerError
	if !errors.As(errs[1], &pe) {
		t.Fatalf("rank 2 got %v, want a peerError", errs[1])
	}
	if pe.peer.member != "m1" || pe.peer.rank != 1 {
		t.Errorf("rank 2 blames %s, want rank 1 of member m1", pe.peer)
	}
	if errs[0] == nil {
		t.Error("rank 0 completed a step of a broken ring")
	}
}

func TestHandshake(t *testing.T) {
	own := hello{Magic: helloMagic, Generation: 5, Rank: 1, Vector: 8}
	tests := []struct {
		name       string
		dialer     hello
		dialErr    func(error) bool
		acceptCode int // exit code of acceptLeft's error; -1: accepted; 0: still waiting
	}{
		{"the left rank of the same generation is linked", hello{helloMagic, 5, 0, 8},
			func(err error) bool { return err == nil }, -1},
		{"an older generation is refused", hello{helloMagic, 4, 0, 8},
			func(err error) bool { return errors.Is(err, errRefused) }, 0},
		{"a newer generation is refused until the listener gets there", hello{helloMagic, 6, 0, 8},
			func(err error) bool { return errors.Is(err, errRefused) }, 0},
		{"another rank is refused", hello{helloMagic, 5, 2, 8},
			func(err error) bool { return errors.Is(err, errRefused) }, 0},
		{"another vector length stops both ends", hello{helloMagic, 5, 0, 16},
			func(err error) bool { var ee *exitError; return errors.As(err, &ee) && ee.code == exitUsage }, exitUsage},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := listenData("127.0.0.1:0", slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			defer l.close()
			actx, cancel := context.WithCancel(context.Background())
			type accepted struct{ err error }
			acc := make(chan accepted, 1)
			go func() {
				conn, err := l.acceptLeft(actx, own, 0)
				if conn != nil {
					conn.Close()
				}
				acc <- accepted{err}
			}()

			conn, err := dialOnce(context.Background(), l.ln.Addr().String(), 1, tt.dialer)
			if conn != nil {
				conn.Close()
			}
			if !tt.dialErr(err) {
				t.Errorf("dial: unexpected %v", err)
			}
			if tt.acceptCode == 0 {
				cancel() // acceptLeft goes on waiting for the right link
			}
			a := <-acc
			cancel()
			var ee *exitError
			switch {
			case tt.acceptCode == -1 && a.err != nil:
				t.Errorf("accept: %v", a.err)
			case tt.acceptCode == 0 && !errors.Is(a.err, context.Canceled):
				t.Errorf("accept: %v, want it still waiting", a.err)
			case tt.acceptCode > 0 && (!errors.As(a.err, &ee) || ee.code != tt.acceptCode):
				t.Errorf("accept: %v, want exit code %d", a.err, tt.acceptCode)
			}
		})
	}
}
