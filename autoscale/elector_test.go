package autoscale

import (
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

// leaseStore holds one Lease as the API server does: every write bumps
// its resourceVersion, and an update that carries another one conflicts.
type leaseStore struct {
	mu    sync.Mutex
	lease *coordinationv1.Lease
	rv    int
	// beforeUpdate, when set, runs once before the next Update is
	// applied: another replica's write between this one's read and write.
	beforeUpdate func()
}

var _ LeaseClient = (*leaseStore)(nil)

var leasesResource = schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}

func (s *leaseStore) Get(_ context.Context, name string, _ metav1.GetOptions) (*coordinationv1.Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lease == nil {
		return nil, apierrors.NewNotFound(leasesResource, name)
	}
	return s.lease.DeepCopy(), nil
}

func (s *leaseStore) Create(_ context.Context, l *coordinationv1.Lease, _ metav1.CreateOptions) (*coordinationv1.Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lease != nil {
		return nil, apierrors.NewAlreadyExists(leasesResource, l.Name)
	}
	return s.store(l), nil
}

func (s *leaseStore) Update(_ context.Context, l *coordinationv1.Lease, _ metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	if hook := s.beforeUpdate; hook != nil {
		s.beforeUpdate = nil
		hook()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lease == nil {
		return nil, apierrors.NewNotFound(leasesResource, l.Name)
	}
	if l.ResourceVersion != s.lease.ResourceVersion {
		return nil, apierrors.NewConflict(leasesResource, l.Name, nil)
	}
	return s.store(l), nil
}

func (s *leaseStore) store(l *coordinationv1.Lease) *coordinationv1.Lease {
	s.rv++
	s.lease = l.DeepCopy()
	s.lease.ResourceVersion = strconv.Itoa(s.rv)
	return s.lease.DeepCopy()
}

func (s *leaseStore) spec() coordinationv1.LeaseSpec {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lease.Spec
}

func testElector(store LeaseClient, clk *clocktesting.FakeClock, id string) *elector {
	return newElector(store, leaseTimes(id), clk, slog.New(slog.DiscardHandler), func(bool) {})
}

func TestAFreeLeaseIsTakenAndRenewedWithTheHoldersRecord(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	store := &leaseStore{}
	a := testElector(store, clk, "a")
	if err := a.tryAcquireOrRenew(ctx); err != nil {
		t.Fatalf("acquire a missing lease: %v", err)
	}
	s := store.spec()
	if holder(s) != "a" || ptr.Deref(s.LeaseDurationSeconds, 0) != 2 || ptr.Deref(s.LeaseTransitions, -1) != 0 ||
		!s.AcquireTime.Time.Equal(clk.Now()) || !s.RenewTime.Time.Equal(clk.Now()) {
		t.Fatalf("created lease %+v: want holder a, 2 s, no transition, acquired and renewed now", s)
	}
	clk.Step(time.Second)
	if err := a.tryAcquireOrRenew(ctx); err != nil {
		t.Fatalf("renew: %v", err)
	}
	s = store.spec()
	if !s.RenewTime.Time.Equal(clk.Now()) || s.AcquireTime.Time.Equal(clk.Now()) || ptr.Deref(s.LeaseTransitions, -1) != 0 {
		t.Fatalf("renewed lease %+v: want the renew time moved, the acquire time and transitions kept", s)
	}
}

// A standby measures a holder's lease on its own clock, from when it first
// saw the record, and starts again whenever the holder renews it.
func TestAStandbyTakesTheLeaseOnlyOnceItsRecordIsUnchangedForItsDuration(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	store := &leaseStore{}
	a, b := testElector(store, clk, "a"), testElector(store, clk, "b")
	if err := a.tryAcquireOrRenew(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.tryAcquireOrRenew(ctx); !isHeld(err) {
		t.Fatalf("b on a's fresh lease: %v, want errHeld", err)
	}
	clk.Step(1500 * time.Millisecond)
	if err := a.tryAcquireOrRenew(ctx); err != nil { // a renews
		t.Fatal(err)
	}
	clk.Step(1500 * time.Millisecond) // 3 s after b first looked, 1.5 s after the renewal
	if err := b.tryAcquireOrRenew(ctx); !isHeld(err) {
		t.Fatalf("b on a's renewed lease: %v, want errHeld", err)
	}
	clk.Step(2 * time.Second) // a stopped renewing 3.5 s ago; b saw its record 2 s ago
	if err := b.tryAcquireOrRenew(ctx); err != nil {
		t.Fatalf("b on a's expired lease: %v", err)
	}
	if s := store.spec(); holder(s) != "b" || ptr.Deref(s.LeaseTransitions, 0) != 1 || !s.AcquireTime.Time.Equal(clk.Now()) {
		t.Fatalf("taken lease %+v: want holder b, one transition, acquired now", s)
	}
	// a's renewal now finds b: it must not write.
	if err := a.tryAcquireOrRenew(ctx); !isHeld(err) {
		t.Fatalf("a's renewal of b's lease: %v, want errHeld", err)
	}
}

// Two standbys that read the same expired record both write it: the
// resourceVersion makes only the first write count.
func TestOfTwoStandbysTakingAnExpiredLeaseOnlyOneWins(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	store := &leaseStore{}
	if err := testElector(store, clk, "gone").tryAcquireOrRenew(ctx); err != nil {
		t.Fatal(err)
	}
	b, c := testElector(store, clk, "b"), testElector(store, clk, "c")
	for _, e := range []*elector{b, c} {
		if err := e.tryAcquireOrRenew(ctx); !isHeld(err) {
			t.Fatalf("%s on a fresh lease: %v, want errHeld", e.cfg.Identity, err)
		}
	}
	clk.Step(3 * time.Second)
	var cErr error
	store.beforeUpdate = func() { cErr = c.tryAcquireOrRenew(ctx) }
	bErr := b.tryAcquireOrRenew(ctx)
	if cErr != nil || !apierrors.IsConflict(bErr) {
		t.Fatalf("c's write between b's read and write: c = %v, b = %v; want c nil, b a conflict", cErr, bErr)
	}
	if s := store.spec(); holder(s) != "c" || ptr.Deref(s.LeaseTransitions, 0) != 1 {
		t.Fatalf("lease %+v: want holder c, one transition", s)
	}
	if b.renewed.Load() != 0 {
		t.Fatal("b counts itself a leader after its write conflicted")
	}
}

func TestAStoppedLeaderReleasesTheLeaseAndAStandbyTakesItAtOnce(t *testing.T) {
	store := &leaseStore{}
	a := newElector(store, leaseTimes("a"), clocktesting.NewFakeClock(time.Now()), slog.New(slog.DiscardHandler), func(bool) {})
	ctx, cancel := context.WithCancel(context.Background())
	leading := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- a.run(ctx, func(lctx context.Context) {
			close(leading)
			<-lctx.Done()
		})
	}()
	await(t, leading, "a to lead")
	cancel()
	if err := await(t, done, "a to stop"); err != nil {
		t.Fatalf("a stopped with %v, want nil", err)
	}
	if s := store.spec(); holder(s) != "" || ptr.Deref(s.LeaseDurationSeconds, 0) != 1 {
		t.Fatalf("released lease %+v: want no holder and 1 s", s)
	}
	// A standby that has just seen a's record takes the free lease.
	if err := testElector(store, clocktesting.NewFakeClock(time.Now()), "b").tryAcquireOrRenew(context.Background()); err != nil {
		t.Fatalf("b on the released lease: %v", err)
	}
	if s := store.spec(); holder(s) != "b" || ptr.Deref(s.LeaseTransitions, 0) != 1 {
		t.Fatalf("lease %+v: want holder b, one transition", s)
	}
}

func TestTheWatchdogFailsALeaderThatStoppedRenewing(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	a := testElector(&leaseStore{}, clk, "a")
	req := httptest.NewRequest("GET", "/healthz", nil)
	if err := a.Check(req); err != nil {
		t.Fatalf("a standby's check: %v", err)
	}
	if err := a.tryAcquireOrRenew(context.Background()); err != nil {
		t.Fatal(err)
	}
	clk.Step(2*time.Second + watchdogTolerance)
	if err := a.Check(req); err != nil {
		t.Fatalf("a leader at its tolerance: %v", err)
	}
	clk.Step(time.Second)
	if err := a.Check(req); err == nil {
		t.Fatal("a leader that has not renewed for 23 s (a 2 s lease) passes its check")
	}
}

func isHeld(err error) bool { return errors.Is(err, errHeld) }
