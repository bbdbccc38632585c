package gossip

import (
	"context"
	"testing"
	"time"
)

func TestAWatchReportsTheExitOfTheWatchedProcessOnly(t *testing.T) {
	members := startCluster(t, 4, nil)
	watcher, victim, live, unwatched := members[0], members[1], members[2], members[3]
	watcher.g.Watch([]string{victim.name, live.name, unwatched.name})
	watcher.g.Watch([]string{victim.name, live.name}) // unwatched is dropped
	awaitWatched(t, victim, 1)
	awaitWatched(t, live, 1)
	if err := unwatched.g.Close(); err != nil { // a dropped watch reports nothing
		t.Fatal(err)
	}
	if err := victim.g.Close(); err != nil { // closes its end, as an exit does
		t.Fatal(err)
	}
	if got := await(t, watcher.rec.closed, "the watcher hears the victim closed"); got != victim.name {
		t.Errorf("the watcher heard %s closed, want %s", got, victim.name)
	}
	// Gossip itself has not noticed yet: the watch is the quick path.
	ctx, cancel := context.WithTimeout(context.Background(), awaitTimeout)
	defer cancel()
	if st, err := watcher.g.Check(ctx, victim.name); err != nil || st != Gone {
		t.Errorf("check after the watch closed: %v, %v; want gone", st, err)
	}
	if extra := pending(watcher.rec.closed); len(extra) > 0 {
		t.Errorf("the watcher heard more closes: %v", extra)
	}
	// A new call reopens nothing for a member that is gone and keeps the
	// live one's watch.
	watcher.g.Watch([]string{victim.name, live.name})
	await(t, watcher.rec.closed, "a refused watch is reported too")
	if got := heldWatches(live); got != 1 {
		t.Errorf("the live member holds %d watches, want 1", got)
	}
}

// awaitWatched waits until m holds n watch streams.
func awaitWatched(t *testing.T, m *member, n int) {
	t.Helper()
	deadline := time.Now().Add(awaitTimeout)
	for time.Now().Before(deadline) {
		if heldWatches(m) == n {
			return
		}
		time.Sleep(5 * time.Millisecond) // polling a count, not waiting for time to pass
	}
	t.Fatalf("%s holds %d watches, want %d", m.name, heldWatches(m), n)
}

func heldWatches(m *member) int {
	m.g.tr.hmu.Lock()
	defer m.g.tr.hmu.Unlock()
	return len(m.g.tr.held)
}
