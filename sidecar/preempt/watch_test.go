package preempt

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

const (
	unrelated     = "example.com/dedicated"
	customTaint   = "example.com/reclaim"
	sentinel      = "test.ringside.dev/sentinel"
	unschedulable = corev1.TaintNodeUnschedulable
)

func TestWatchCallsBackOnceForATerminationTaint(t *testing.T) {
	t.Parallel()
	// Every case ends by adding the sentinel taint, which Watch also looks
	// for. Events reach the handler in order, so the first call carries the
	// sentinel's key exactly when nothing before it was reported: the cases
	// that expect no call show it without waiting for something not to
	// happen. A call after the first is made before Watch returns.
	tests := []struct {
		name    string
		taints  []string         // Config.Taints besides the sentinel; nil means DefaultTaints()
		initial []corev1.Taint   // the node's taints when Watch starts
		updates [][]corev1.Taint // the node's taints after each later update
		want    string           // the key of the one call; sentinel if nothing came before it
	}{
		{
			name: "a node without taints is not reported",
			want: sentinel,
		},
		{
			name:    "a taint added by an update is reported with its key",
			updates: [][]corev1.Taint{{taint(TaintClusterAutoscaler)}},
			want:    TaintClusterAutoscaler,
		},
		{
			name:    "a node tainted before the watch starts is reported",
			initial: []corev1.Taint{taint(TaintGKEImpendingTermination)},
			want:    TaintGKEImpendingTermination,
		},
		{
			name:    "an unrelated taint is not reported",
			initial: []corev1.Taint{taint(unrelated)},
			updates: [][]corev1.Taint{{taint(unrelated), taint(unrelated + "-too")}},
			want:    sentinel,
		},
		{
			name: "after an unrelated taint the matching one is reported",
			updates: [][]corev1.Taint{
				{taint(unrelated)},
				{taint(unrelated), taint(TaintAWSSpotInterruption)},
			},
			want: TaintAWSSpotInterruption,
		},
		{
			name:    "a second matching taint later is not reported again",
			initial: []corev1.Taint{taint(TaintKarpenterDisrupted)},
			updates: [][]corev1.Taint{{taint(TaintKarpenterDisrupted), taint(TaintClusterAutoscaler)}},
			want:    TaintKarpenterDisrupted,
		},
		{
			name:    "a taint removed and added again is reported once",
			updates: [][]corev1.Taint{{taint(TaintAWSRebalanceRecommendation)}, {}, {taint(TaintAWSRebalanceRecommendation)}},
			want:    TaintAWSRebalanceRecommendation,
		},
		{
			name:    "a cordon is not a termination by default",
			updates: [][]corev1.Taint{{taint(unschedulable)}},
			want:    sentinel,
		},
		{
			name:    "a custom list reports its own key",
			taints:  []string{customTaint},
			updates: [][]corev1.Taint{{taint(customTaint)}},
			want:    customTaint,
		},
		{
			name:    "a custom list ignores the default keys it leaves out",
			taints:  []string{customTaint},
			initial: []corev1.Taint{taint(TaintClusterAutoscaler)},
			updates: [][]corev1.Taint{{taint(TaintClusterAutoscaler), taint(customTaint)}},
			want:    customTaint,
		},
		{
			name:    "a custom list can make a cordon a termination",
			taints:  append(DefaultTaints(), unschedulable),
			updates: [][]corev1.Taint{{taint(unschedulable)}},
			want:    unschedulable,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := DefaultConfig(testNode)
			if tt.taints != nil {
				cfg.Taints = tt.taints
			}
			cfg.Taints = append(slices.Clone(cfg.Taints), sentinel)
			r := startWatch(t, fake.NewClientset(newNode(testNode, 0, tt.initial...)), cfg)
			r.waitSeen(testNode, 0)
			last := tt.initial
			for i, taints := range tt.updates {
				r.update(testNode, i+1, taints...)
				last = taints
			}
			r.update(testNode, len(tt.updates)+1, append(slices.Clone(last), taint(sentinel))...)
			if got := r.nextCall(); got != tt.want {
				t.Errorf("onTermination(%q), want %q", got, tt.want)
			}
			if more := r.callsAfterStop(); len(more) > 0 {
				t.Errorf("further onTermination calls %q, want none", more)
			}
		})
	}
}

func TestWatchIgnoresOtherNodes(t *testing.T) {
	t.Parallel()
	// The fake clientset ignores field selectors, so the other node reaches
	// the handler, as it would from a server that did the same.
	client := fake.NewClientset(
		newNode(testNode, 0),
		newNode("node-b", 0, taint(TaintClusterAutoscaler)),
	)
	r := startWatch(t, client, DefaultConfig(testNode))
	r.waitSeen("node-b", 0)
	r.update("node-b", 1, taint(TaintClusterAutoscaler), taint(TaintKarpenterDisrupted))
	r.update(testNode, 1, taint(TaintAWSScheduledMaintenance))
	if got := r.nextCall(); got != TaintAWSScheduledMaintenance {
		t.Errorf("onTermination(%q), want %q: the call came from another node", got, TaintAWSScheduledMaintenance)
	}
	if more := r.callsAfterStop(); len(more) > 0 {
		t.Errorf("further onTermination calls %q, want none", more)
	}
}

func TestWatchSelectsItsNodeByName(t *testing.T) {
	t.Parallel()
	client := fake.NewClientset(newNode(testNode, 0))
	// The fake records a request before its reactors run: once this one
	// runs, the watch is on record. (An update seen by the handler is no
	// sign of it: made before the first list, the list brings it.)
	watched := make(chan struct{})
	closeWatched := sync.OnceFunc(func() { close(watched) })
	client.PrependWatchReactor("nodes", func(k8stesting.Action) (bool, watch.Interface, error) {
		closeWatched()
		return false, nil, nil
	})
	r := startWatch(t, client, DefaultConfig(testNode))
	r.update(testNode, 1)
	select {
	case <-watched:
	case <-time.After(waitTimeout):
		t.Fatalf("no watch of nodes within %v", waitTimeout)
	}
	if err := r.stop(); err != nil {
		t.Fatalf("Watch returned %v, want nil", err)
	}
	want := "metadata.name=" + testNode
	verbs := map[string]bool{}
	for _, action := range client.Actions() {
		if action.GetResource().Resource != "nodes" {
			continue
		}
		var selector string
		switch a := action.(type) {
		case k8stesting.ListActionImpl:
			selector = a.ListOptions.FieldSelector
		case k8stesting.WatchActionImpl:
			selector = a.ListOptions.FieldSelector
		default:
			continue
		}
		verbs[action.GetVerb()] = true
		if selector != want {
			t.Errorf("%s nodes with field selector %q, want %q", action.GetVerb(), selector, want)
		}
	}
	if !verbs["list"] || !verbs["watch"] {
		t.Errorf("node requests %v, want both list and watch", verbs)
	}
}

func TestWatchReturnsErrNoAccessWhenRefusedAtStart(t *testing.T) {
	t.Parallel()
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "", errors.New("RBAC: no rule allows it"))
	unauthorized := apierrors.NewUnauthorized("token rejected")
	tests := []struct {
		name  string
		setup func(*fake.Clientset)
		is    func(error) bool
	}{
		{
			name: "list forbidden",
			setup: func(c *fake.Clientset) {
				c.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, forbidden
				})
			},
			is: apierrors.IsForbidden,
		},
		{
			name: "list allowed but watch forbidden",
			setup: func(c *fake.Clientset) {
				c.PrependWatchReactor("nodes", func(k8stesting.Action) (bool, watch.Interface, error) {
					return true, nil, forbidden
				})
			},
			is: apierrors.IsForbidden,
		},
		{
			name: "token rejected",
			setup: func(c *fake.Clientset) {
				c.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, unauthorized
				})
			},
			is: apierrors.IsUnauthorized,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			client := fake.NewClientset(newNode(testNode, 0))
			tt.setup(client)
			r := startWatch(t, client, DefaultConfig(testNode))
			var err error
			select {
			case err = <-r.done:
				r.done <- err
			case <-time.After(waitTimeout):
				t.Fatalf("Watch still running %v after the refusal", waitTimeout)
			}
			if !errors.Is(err, ErrNoAccess) || !tt.is(err) {
				t.Errorf("Watch returned %v, want ErrNoAccess wrapping the API error", err)
			}
		})
	}
}

func TestWatchRetriesARefusalAfterItHasWatched(t *testing.T) {
	t.Parallel()
	client := fake.NewClientset(newNode(testNode, 0))
	// The first watch breaks at the test's word; the relist after it is
	// refused once; everything after that goes to the fake's tracker.
	firstWatch := make(chan *watch.FakeWatcher, 1)
	var watches, lists atomic.Int32
	client.PrependWatchReactor("nodes", func(k8stesting.Action) (bool, watch.Interface, error) {
		if watches.Add(1) > 1 {
			return false, nil, nil
		}
		w := watch.NewFake()
		firstWatch <- w
		return true, w, nil
	})
	client.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		if lists.Add(1) != 2 {
			return false, nil, nil
		}
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, testNode, errors.New("RBAC: cache not warm"))
	})
	r := startWatch(t, client, DefaultConfig(testNode))
	var w *watch.FakeWatcher
	select {
	case w = <-firstWatch:
	case <-time.After(waitTimeout):
		t.Fatalf("no watch within %v", waitTimeout)
	}
	w.Error(&apierrors.NewServiceUnavailable("apiserver restarting").ErrStatus)
	r.update(testNode, 1, taint(TaintAWSASGLifecycleTermination))
	if got := r.nextCall(); got != TaintAWSASGLifecycleTermination {
		t.Errorf("onTermination(%q), want %q", got, TaintAWSASGLifecycleTermination)
	}
	if n := lists.Load(); n < 3 {
		t.Errorf("%d lists, want at least 3: the refused relist was not retried", n)
	}
}

func TestWatchReturnsNilWhenContextEnds(t *testing.T) {
	t.Parallel()
	t.Run("while watching", func(t *testing.T) {
		t.Parallel()
		r := startWatch(t, fake.NewClientset(newNode(testNode, 0)), DefaultConfig(testNode))
		r.waitSeen(testNode, 0)
		if err := r.stop(); err != nil {
			t.Errorf("Watch returned %v, want nil", err)
		}
	})
	t.Run("after calling back", func(t *testing.T) {
		t.Parallel()
		r := startWatch(t, fake.NewClientset(newNode(testNode, 0, taint(TaintClusterAutoscaler))), DefaultConfig(testNode))
		r.nextCall()
		if err := r.stop(); err != nil {
			t.Errorf("Watch returned %v, want nil", err)
		}
	})
	t.Run("before it starts", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		client := fake.NewClientset(newNode(testNode, 0, taint(TaintClusterAutoscaler)))
		err := Watch(ctx, nodesOf(client), DefaultConfig(testNode), func(string) {})
		if err != nil {
			t.Errorf("Watch returned %v, want nil", err)
		}
	})
	t.Run("while the API server is unreachable", func(t *testing.T) {
		t.Parallel()
		client := fake.NewClientset()
		listed := make(chan struct{}, 1)
		client.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
			select {
			case listed <- struct{}{}:
			default:
			}
			return true, nil, apierrors.NewServiceUnavailable("no API server")
		})
		r := startWatch(t, client, DefaultConfig(testNode))
		select {
		case <-listed:
		case <-time.After(waitTimeout):
			t.Fatalf("no list within %v", waitTimeout)
		}
		if err := r.stop(); err != nil {
			t.Errorf("Watch returned %v, want nil", err)
		}
	})
}

func TestWatchRejectsBadArguments(t *testing.T) {
	t.Parallel()
	client := fake.NewClientset()
	tests := []struct {
		name          string
		client        *fake.Clientset
		cfg           Config
		onTermination func(string)
	}{
		{"an empty node name", client, DefaultConfig(""), func(string) {}},
		{"an empty taint key", client, Config{NodeName: testNode, Taints: []string{TaintClusterAutoscaler, ""}}, func(string) {}},
		{"a nil client", nil, DefaultConfig(testNode), func(string) {}},
		{"a nil callback", client, DefaultConfig(testNode), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var err error
			if tt.client == nil {
				err = Watch(t.Context(), nil, tt.cfg, tt.onTermination)
			} else {
				err = Watch(t.Context(), nodesOf(tt.client), tt.cfg, tt.onTermination)
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("Watch returned %v, want ErrInvalidConfig", err)
			}
		})
	}
}
