package coordinator

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ringside/ringside/coordinator/record"
)

// Members draining at once each add their figure: the compare-and-swap
// loses none of them.
func TestDrainsRecordedTogetherAreAllKept(t *testing.T) {
	j, client := testJob(t)
	ctx := context.Background()
	const n = 6
	members := make([]*Member, n)
	for i := range members {
		members[i] = join(t, j, fmt.Sprint(i))
	}
	key := j.cfg.Prefix() + record.DrainsKey
	if _, err := client.Put(ctx, key, `{"seconds":[-1]}`); err != nil { // malformed: replaced
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, m := range members {
		wg.Go(func() { errs[i] = m.RecordDrain(ctx, time.Duration(i+1)*time.Second) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("member %d: %v", i, err)
		}
	}
	resp, err := client.Get(ctx, key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("get %s: %v", key, err)
	}
	d, err := record.DecodeDrains(resp.Kvs[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	got := slices.Sorted(slices.Values(d.Seconds))
	if want := []float64{1, 2, 3, 4, 5, 6}; !slices.Equal(got, want) {
		t.Errorf("drains %v, want %v", got, want)
	}
	if resp.Kvs[0].Lease != 0 {
		t.Errorf("the drains key is on lease %x; it must outlive the members", resp.Kvs[0].Lease)
	}
}
