package jobstatus

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ringside/ringside/internal/etcdtest"
)

func TestFollowRefreshesAtOnceOnANewGeneration(t *testing.T) {
	srv := etcdtest.Start(t)
	client := etcdtest.Client(t, srv)
	put := func(n int64) int64 {
		t.Helper()
		resp, err := client.Put(context.Background(), "/ringside/default/llama/generation", mustJSON(generation(n).g))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}
	rev := put(1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	refreshed := make(chan struct{}, 10)
	stop := errors.New("stop")
	done := make(chan error, 1)
	go func() {
		calls := 0
		// An hour between ticks: only the watch can refresh in time.
		done <- Follow(ctx, client, "default", "llama", rev, time.Hour, func() error {
			calls++
			refreshed <- struct{}{}
			if calls == 2 {
				return stop
			}
			return nil
		})
	}()
	put(2)
	<-refreshed
	put(3)
	<-refreshed
	if err := <-done; !errors.Is(err, stop) {
		t.Fatalf("Follow = %v, want refresh's error", err)
	}
}

func TestFollowEndsWithItsContext(t *testing.T) {
	srv := etcdtest.Start(t)
	client := etcdtest.Client(t, srv)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Follow(ctx, client, "default", "llama", 1, time.Hour, func() error { return errors.New("refreshed") }); err != nil {
		t.Fatalf("Follow after its context ended = %v, want nil", err)
	}
}
