package autoscale

import (
	"context"
	"log/slog"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/ringside/ringside/autoscale/v1alpha1"
)

// eventLog is an EventClient that hands each created Event to a channel.
type eventLog chan *corev1.Event

func (l eventLog) Create(_ context.Context, e *corev1.Event) (*corev1.Event, error) {
	l <- e
	return e, nil
}

func TestAnEventNamesItsScalerAndComesFromTheController(t *testing.T) {
	written := make(eventLog, 1)
	now := time.Unix(1700000000, 0)
	r := newEventRecorder(written, EventComponent, clocktesting.NewFakePassiveClock(now), slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.run(ctx)
	}()
	defer func() { cancel(); <-done }()

	u := scaler("grow")
	u.SetResourceVersion("7")
	r.Event(u, corev1.EventTypeNormal, ReasonSuccessfulRescale, "New size: 1 -> 2")
	e := await(t, written, "the Event to be written")
	ref := e.InvolvedObject
	if ref.APIVersion != v1alpha1.GroupVersion.String() || ref.Kind != "ElasticScaler" || ref.Namespace != testNS ||
		ref.Name != "grow" || ref.UID != "uid-grow" || ref.ResourceVersion != "7" {
		t.Errorf("involved object %+v: want the scaler", ref)
	}
	if e.Namespace != testNS || e.Type != corev1.EventTypeNormal || e.Reason != ReasonSuccessfulRescale || e.Message != "New size: 1 -> 2" ||
		e.Source.Component != EventComponent || e.Count != 1 || !e.FirstTimestamp.Time.Equal(now) || !e.LastTimestamp.Time.Equal(now) {
		t.Errorf("event %+v", e)
	}
	if e.Name == "" || e.Name == "grow" {
		t.Errorf("event name %q: want the scaler's with a unique suffix", e.Name)
	}
}
