package autoscale

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
)

// EventRecorder records an Event about an object. client-go's
// record.EventRecorder (and its FakeRecorder) has this method.
type EventRecorder interface {
	Event(object runtime.Object, eventType, reason, message string)
}

// EventClient creates Events, each in its own namespace.
type EventClient interface {
	Create(ctx context.Context, e *corev1.Event) (*corev1.Event, error)
}

var (
	_ EventRecorder = (*eventRecorder)(nil)
	_ EventClient   = eventClient{}
)

// eventRecorder writes the controller's Events to the API server in the
// background, so that recording never blocks a sync. It is not client-go's
// tools/record: that package computes the patches of its Event
// aggregation with strategic merge patch, which links the OpenAPI models
// (about 4 MB of the binary), and the controller needs no aggregation: it
// records an Event only when a condition changes or the target is
// rescaled.
type eventRecorder struct {
	client EventClient
	source corev1.EventSource
	clock  clock.PassiveClock
	log    *slog.Logger
	queue  chan *corev1.Event
}

// eventQueue bounds the Events waiting to be written; when the API server
// is slower than that, Events are dropped (and logged), as client-go's
// recorder drops them.
const eventQueue = 100

func newEventRecorder(client EventClient, component string, clk clock.PassiveClock, log *slog.Logger) *eventRecorder {
	return &eventRecorder{client: client, source: corev1.EventSource{Component: component}, clock: clk, log: log,
		queue: make(chan *corev1.Event, eventQueue)}
}

// Event queues an Event of eventType about object; it does not block.
func (r *eventRecorder) Event(object runtime.Object, eventType, reason, message string) {
	m, err := meta.Accessor(object)
	if err != nil {
		r.log.Warn("cannot record an Event about an object without metadata", "type", fmt.Sprintf("%T", object), "reason", reason)
		return
	}
	gvk := object.GetObjectKind().GroupVersionKind()
	ns := m.GetNamespace()
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	now := metav1.NewTime(r.clock.Now())
	e := &corev1.Event{
		// client-go's naming: unique per object and nanosecond.
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", m.GetName(), now.UnixNano()), Namespace: ns},
		InvolvedObject: corev1.ObjectReference{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind,
			Namespace: m.GetNamespace(), Name: m.GetName(), UID: m.GetUID(), ResourceVersion: m.GetResourceVersion()},
		Reason: reason, Message: message, Type: eventType, Source: r.source,
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	select {
	case r.queue <- e:
	default:
		r.log.Warn("dropping an Event: too many wait to be written", "object", ns+"/"+m.GetName(), "reason", reason)
	}
}

// run writes the queued Events until ctx ends.
func (r *eventRecorder) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case e := <-r.queue:
			wctx, cancel := context.WithTimeout(ctx, eventTimeout)
			_, err := r.client.Create(wctx, e)
			cancel()
			if err != nil && ctx.Err() == nil {
				r.log.Warn("cannot write an Event", "object", e.Namespace+"/"+e.InvolvedObject.Name, "reason", e.Reason, "err", err)
			}
		}
	}
}

// eventClient creates Events through the core/v1 REST client.
type eventClient struct {
	rest rest.Interface
}

// eventTimeout bounds one write of an Event.
const eventTimeout = 10 * time.Second

func (c eventClient) Create(ctx context.Context, e *corev1.Event) (*corev1.Event, error) {
	out := &corev1.Event{}
	err := c.rest.Post().Namespace(e.Namespace).Resource("events").Body(e).Do(ctx).Into(out)
	return out, err
}
