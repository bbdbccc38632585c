// Package progress tells the reader of a long tool run that it is still
// going: a benchmark's count of joined members, a build that prints nothing
// for minutes. Without it a quiet run is taken for a hung one.
package progress

import (
	"sync"
	"time"
)

// Every calls report once a period, from a goroutine of its own, until stop
// is called. stop returns once that goroutine has ended, so report is never
// called after it; it must be called exactly once.
func Every(period time.Duration, report func()) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				report()
			}
		}
	})
	return func() { close(done); wg.Wait() }
}
