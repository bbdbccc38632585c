package autoscale

import (
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"runtime/debug"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"github.com/ringside/ringside/autoscale/v1alpha1"
	"github.com/ringside/ringside/coordinator/jobstatus"
)

// Reasons of the controller's own conditions and Events (the policy's
// decision brings its own reasons for ScalingActive and ScalingLimited).
const (
	ReasonInvalidSpec       = "InvalidSpec"
	ReasonFailedGetScale    = "FailedGetScale"
	ReasonFailedUpdateScale = "FailedUpdateScale"
	ReasonReadyForNewScale  = "ReadyForNewScale"
	ReasonFailedReadJob     = "FailedReadJob"
	ReasonFailedDecide      = "FailedDecide"
	// ReasonFailedDisruptionBudget: spec.podDisruptionBudget asks for a
	// budget the controller cannot create or update.
	ReasonFailedDisruptionBudget = "FailedDisruptionBudget"
	// ReasonFailedPodGroup: a gang scheduler's PodGroup CRD is served and
	// the controller cannot create or update the job's PodGroup.
	ReasonFailedPodGroup = "FailedPodGroup"
	ReasonWithinRange    = "DesiredWithinRange"
	// Events of a change of the target's size, as the HPA's.
	ReasonSuccessfulRescale = "SuccessfulRescale"
	ReasonFailedRescale     = "FailedRescale"
	// ReasonTrainerCrashes: trainer crashes stopped the job (JobStopped),
	// also the reason of the Event on each of its pods.
	ReasonTrainerCrashes = "TrainerCrashes"
)

// sync brings the ElasticScaler of key ("namespace/name") one step
// forward: it reads the target's scale, the job's status and the target's
// pending pods, decides, rescales the target when the decision changes its
// size, and writes the status when it changed. It is idempotent: with
// nothing new it writes nothing. An error asks for a retry with back-off;
// what a retry cannot fix (an invalid spec) is reported in a condition and
// returns nil.
func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		c.log.Warn("dropping a malformed key", "key", key, "err", err)
		return nil
	}
	obj, err := c.scalers.ByNamespace(ns).Get(name)
	if apierrors.IsNotFound(err) {
		c.history.forget(key)
		c.findings.news(key, jobstatus.Snapshot{})
		c.metrics.desired.DeleteLabelValues(ns, name)
		c.metrics.throughput.DeleteLabelValues(ns, name)
		c.metrics.goodput.DeleteLabelValues(ns, name)
		return nil
	}
	if err != nil {
		return fmt.Errorf("get %s from the cache: %w", key, err)
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		c.log.Warn("dropping an ElasticScaler the cache holds as neither object nor unstructured", "scaler", key, "type", fmt.Sprintf("%T", obj))
		return nil
	}
	es, statusOK, specErr := decode(u)
	s := &scalerSync{c: c, key: key, u: u, es: es, orig: *es.Status.DeepCopy(), statusOK: statusOK, now: c.clock.Now()}
	if specErr != nil {
		msg := "the ElasticScaler's spec is invalid: " + specErr.Error()
		s.condition(v1alpha1.AbleToScale, metav1.ConditionFalse, ReasonInvalidSpec, msg, corev1.EventTypeWarning)
		return s.writeStatus(ctx)
	}
	return s.run(ctx)
}

// scalerSync is one sync of one ElasticScaler.
type scalerSync struct {
	c        *Controller
	key      string
	u        *unstructured.Unstructured // the cache's object: read only
	es       *v1alpha1.ElasticScaler    // the controller's copy, status updated in place
	orig     v1alpha1.ElasticScalerStatus
	statusOK bool
	now      time.Time
	// workers is the job's capacity as this sync read it, for the phase.
	workers int32
}

func (s *scalerSync) run(ctx context.Context) error {
	es, c := s.es, s.c
	ref := es.Spec.ScaleTargetRef
	if s.suspended(s.suspension(ctx)) {
		return s.writeStatus(ctx)
	}
	target, resource, err := c.getScale(ctx, es.Namespace, ref.APIVersion, ref.Kind, ref.Name)
	if err != nil {
		msg := fmt.Sprintf("the controller cannot get the scale of %s %s/%s: %v", ref.Kind, es.Namespace, ref.Name, err)
		s.condition(v1alpha1.AbleToScale, metav1.ConditionFalse, ReasonFailedGetScale, msg, corev1.EventTypeWarning)
		return errors.Join(fmt.Errorf("get the scale of %s %s/%s: %w", ref.Kind, es.Namespace, ref.Name, err), s.writeStatus(ctx))
	}
	current := target.Spec.Replicas
	es.Status.CurrentReplicas, es.Status.Selector = current, target.Status.Selector
	if err := s.disruptionBudget(ctx, target.Status.Selector); err != nil {
		msg := fmt.Sprintf("the controller cannot keep the PodDisruptionBudget of %s %s/%s: %v", ref.Kind, es.Namespace, ref.Name, err)
		s.condition(v1alpha1.AbleToScale, metav1.ConditionFalse, ReasonFailedDisruptionBudget, msg, corev1.EventTypeWarning)
		return errors.Join(errors.New(msg), s.writeStatus(ctx))
	}
	if err := s.podGroups(ctx); err != nil {
		msg := fmt.Sprintf("the controller cannot keep the PodGroup of job %s: %v", es.Spec.Job.Name, err)
		s.condition(v1alpha1.AbleToScale, metav1.ConditionFalse, ReasonFailedPodGroup, msg, corev1.EventTypeWarning)
		return errors.Join(errors.New(msg), s.writeStatus(ctx))
	}
	in := Input{Now: s.now, Spec: es.Spec, Current: current}
	in.Pending, in.PendingFor, err = pendingPods(c.podInformer.GetIndexer(), es.Namespace, target.Status.Selector, s.now)
	if err != nil {
		c.log.Warn("cannot count the target's pending pods; counting none", "scaler", s.key, "err", err)
	}

	snap, err := c.readJob(ctx, es)
	if err != nil {
		msg := fmt.Sprintf("the controller cannot read job %s's status from etcd (%v): the target's size is held, and training goes on at it", s.jobName(), err)
		s.condition(v1alpha1.AbleToScale, metav1.ConditionTrue, ReasonReadyForNewScale, "the controller can get and update the target's scale", "")
		s.condition(v1alpha1.ScalingActive, metav1.ConditionFalse, ReasonFailedReadJob, msg, corev1.EventTypeWarning)
		return errors.Join(fmt.Errorf("read job %s: %w", s.jobName(), err), s.writeStatus(ctx))
	}
	s.jobStopped(snap)
	s.drained(snap.DrainSeconds)
	es.Status.WorldSize, es.Status.JobGeneration = int32(min(snap.WorldSize, math.MaxInt32)), snap.Generation
	stragglerErr := s.stragglers(ctx, snap)
	js := readJobState(snap, c.cfg.MeasureMaxAge)
	if js.Measurement != nil && c.history.generationAge(s.key, snap.Generation, s.now) < c.cfg.MeasureSettle {
		js.Measurement = nil // the re-form is still in the rates
	}
	in.Workers, in.Draining, in.HaveStatus, in.StatusAge = js.Workers, js.Draining, js.HaveStatus, js.StatusAge
	s.workers = js.Workers
	in.Recommendations, in.Changes = c.history.get(s.key, s.now)
	d, err := s.decide(in, js.Measurement)
	if err != nil {
		s.condition(v1alpha1.ScalingActive, metav1.ConditionFalse, ReasonFailedDecide, err.Error(), corev1.EventTypeWarning)
		return errors.Join(err, stragglerErr, s.writeStatus(ctx))
	}
	in.Throughput = es.Status.Throughput
	s.measured(in)
	c.history.addRecommendation(s.key, Recommendation{Time: s.now, Replicas: d.Recommendation})
	desired := max(es.Spec.MinReplicas, min(es.Spec.MaxReplicas, d.Desired))
	if desired != d.Desired {
		c.log.Warn("the policy decided a size out of [min, max]; clamped", "scaler", s.key, "decided", d.Desired, "desired", desired)
	}
	if desired != current {
		if err := s.rescale(ctx, target, resource, desired, d); err != nil {
			return errors.Join(err, stragglerErr, s.writeStatus(ctx))
		}
	}
	s.condition(v1alpha1.AbleToScale, metav1.ConditionTrue, ReasonReadyForNewScale, "the controller can get and update the target's scale", "")
	s.decided(d, desired)
	return errors.Join(stragglerErr, s.writeStatus(ctx))
}

// decide folds m (when it is new) into the throughput history and asks
// the policy. A panic of the policy on odd input is an error of this
// scaler's sync, not the end of the controller that syncs all the others.
func (s *scalerSync) decide(in Input, m *Measurement) (d Decision, err error) {
	defer func() {
		if r := recover(); r != nil {
			s.c.log.Error("the policy panicked", "scaler", s.key, "panic", r, "stack", string(debug.Stack()))
			err = fmt.Errorf("the policy failed on this scaler's input: %v", r)
		}
	}()
	th := s.es.Status.Throughput
	if m != nil && m.Time.After(newestObservation(th)) {
		th = Observe(th, *m)
	}
	in.Throughput = th
	d = Decide(in)
	s.es.Status.Throughput = th
	return d, nil
}

// rescale sets the target's replicas to desired.
func (s *scalerSync) rescale(ctx context.Context, target *autoscalingv1.Scale, resource schema.GroupVersionResource, desired int32, d Decision) error {
	es, c := s.es, s.c
	current := target.Spec.Replicas
	why := d.Message
	if why == "" {
		why = d.Reason
	}
	next := target.DeepCopy()
	next.Spec.Replicas = desired
	if _, err := c.deps.Scales.UpdateScale(ctx, resource, es.Namespace, next); err != nil {
		msg := fmt.Sprintf("New size: %d -> %d; reason: %s; error: %v", current, desired, why, err)
		c.events.Event(s.u, corev1.EventTypeWarning, ReasonFailedRescale, msg)
		s.condition(v1alpha1.AbleToScale, metav1.ConditionFalse, ReasonFailedUpdateScale, "the controller cannot update the target's scale: "+msg, "")
		return fmt.Errorf("update the scale of %s %s/%s to %d: %w", es.Spec.ScaleTargetRef.Kind, es.Namespace, es.Spec.ScaleTargetRef.Name, desired, err)
	}
	c.events.Event(s.u, corev1.EventTypeNormal, ReasonSuccessfulRescale, fmt.Sprintf("New size: %d -> %d; reason: %s", current, desired, why))
	c.log.Info("rescaled", "scaler", s.key, "from", current, "to", desired, "reason", d.Reason, "message", d.Message)
	direction := "up"
	if desired < current {
		direction = "down"
	}
	c.metrics.scaleEvents.WithLabelValues(direction).Inc()
	c.history.addChange(s.key, Change{Time: s.now, From: current, To: desired})
	es.Status.LastScaleTime = &metav1.Time{Time: s.now.Truncate(time.Second)}
	// The target's spec now asks for desired: what the next sync reads.
	es.Status.CurrentReplicas = desired
	return nil
}

// decided records decision d (desired after the controller's clamp) in
// the status and the desired-replicas gauge.
func (s *scalerSync) decided(d Decision, desired int32) {
	es := s.es
	es.Status.DesiredReplicas = desired
	es.Status.Efficiency = nil
	if e := d.Efficiency; e != nil && !math.IsNaN(*e) && !math.IsInf(*e, 0) {
		v := *e
		es.Status.Efficiency = &v
	}
	active := metav1.ConditionFalse
	if d.Active {
		active = metav1.ConditionTrue
	}
	s.condition(v1alpha1.ScalingActive, active, conditionReason(d.Reason, "Decided"), d.Message, "")
	if d.Limited {
		s.condition(v1alpha1.ScalingLimited, metav1.ConditionTrue, conditionReason(d.LimitReason, "Limited"), d.LimitMessage, "")
	} else {
		s.condition(v1alpha1.ScalingLimited, metav1.ConditionFalse, ReasonWithinRange, "the desired size is within range", "")
	}
	s.c.metrics.desired.WithLabelValues(es.Namespace, es.Name).Set(float64(desired))
}

// measured exports the throughput and goodput the history holds at the
// job's current size, or drops them while it holds no recent reading
// there: a stalled or resizing job has no throughput to show, and a stale
// one would pass for it.
func (s *scalerSync) measured(in Input) {
	ns, name := s.es.Namespace, s.es.Name
	h, ok := currentThroughput(in)
	if !ok {
		s.es.Status.Goodput = nil
		s.c.metrics.throughput.DeleteLabelValues(ns, name)
		s.c.metrics.goodput.DeleteLabelValues(ns, name)
		return
	}
	// Rounded to a hundredth: a goodput that moves in its last digits
	// would otherwise rewrite the status at every sync.
	g := math.Round(h.Goodput*100) / 100
	s.es.Status.Goodput = &g
	s.c.metrics.throughput.WithLabelValues(ns, name).Set(h.SamplesPerSecond)
	s.c.metrics.goodput.WithLabelValues(ns, name).Set(h.Goodput)
}

// jobStopped shows a job that trainer crashes stopped: the JobStopped
// condition, and once, as it turns true, an Event on the ElasticScaler
// and on each pod of the job's members (their names are the member ids),
// where `kubectl describe pod` shows it.
func (s *scalerSync) jobStopped(snap jobstatus.Snapshot) {
	if snap.Stopped == "" {
		meta.RemoveStatusCondition(&s.es.Status.Conditions, v1alpha1.JobStopped)
		return
	}
	msg := "trainer crashes stopped job " + s.jobName() + ": " + snap.Stopped
	if !s.condition(v1alpha1.JobStopped, metav1.ConditionTrue, ReasonTrainerCrashes, msg, corev1.EventTypeWarning) {
		return
	}
	pods := s.c.podInformer.GetIndexer()
	for _, m := range snap.Members {
		obj, ok, err := pods.GetByKey(s.es.Namespace + "/" + m.ID)
		pod, isPod := obj.(*corev1.Pod)
		if err != nil || !ok || !isPod {
			continue
		}
		pod = pod.DeepCopy() // the cache's objects carry no kind, which the Event names
		pod.APIVersion, pod.Kind = "v1", "Pod"
		s.c.events.Event(pod, corev1.EventTypeWarning, ReasonTrainerCrashes, msg)
	}
}

// condition sets a condition of the status; when it changed and
// eventType is not empty, it also records an Event of its reason, so a
// lasting failure is one Event, not one per sync. It reports whether the
// condition changed.
func (s *scalerSync) condition(typ string, status metav1.ConditionStatus, reason, msg, eventType string) bool {
	if msg == "" {
		msg = reason
	}
	if len(msg) > maxConditionMessage {
		msg = msg[:maxConditionMessage]
	}
	changed := meta.SetStatusCondition(&s.es.Status.Conditions, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: msg,
		ObservedGeneration: s.es.Generation, LastTransitionTime: metav1.NewTime(s.now.Truncate(time.Second)),
	})
	if changed && eventType != "" {
		s.c.events.Event(s.u, eventType, reason, msg)
	}
	return changed
}

// writeStatus writes the status through the status subresource, unless
// it is what the object holds already.
func (s *scalerSync) writeStatus(ctx context.Context) error {
	es := s.es
	es.Status.ObservedGeneration = es.Generation
	es.Status.Phase = phaseOf(es.Status, s.workers)
	if s.statusOK && equality.Semantic.DeepEqual(s.orig, es.Status) {
		return nil
	}
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&es.Status)
	if err != nil {
		return fmt.Errorf("encode the status of %s: %w", s.key, err)
	}
	out := s.u.DeepCopy()
	out.Object["status"] = content
	if _, err := s.c.deps.Dynamic.Resource(v1alpha1.Resource).Namespace(es.Namespace).UpdateStatus(ctx, out, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update the status of %s: %w", s.key, err)
	}
	return nil
}

func (s *scalerSync) jobName() string {
	return jobNamespace(s.es) + "/" + s.es.Spec.Job.Name
}

func jobNamespace(es *v1alpha1.ElasticScaler) string {
	if es.Spec.Job.Namespace != "" {
		return es.Spec.Job.Namespace
	}
	return es.Namespace
}

// getScale reads the scale of the target named by apiVersion, kind and
// name, trying each resource the kind maps to (as the HPA does).
func (c *Controller) getScale(ctx context.Context, namespace, apiVersion, kind, name string) (*autoscalingv1.Scale, schema.GroupVersionResource, error) {
	resources, err := c.targetResources(ctx, apiVersion, kind)
	if err != nil {
		return nil, schema.GroupVersionResource{}, err
	}
	var first error
	for _, r := range resources {
		sc, err := c.deps.Scales.GetScale(ctx, r, namespace, name)
		if err == nil {
			return sc, r, nil
		}
		if first == nil {
			first = err
		}
	}
	if first == nil {
		first = fmt.Errorf("no resource of kind %s", kind)
	}
	return nil, schema.GroupVersionResource{}, first
}

// targetResources maps a target's apiVersion and kind to its resources
// (the group's preferred version when apiVersion names none).
func (c *Controller) targetResources(ctx context.Context, apiVersion, kind string) ([]schema.GroupVersionResource, error) {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return nil, fmt.Errorf("apiVersion %q: %w", apiVersion, err)
	}
	var versions []string
	if gv.Version != "" {
		versions = append(versions, gv.Version)
	}
	resources, err := c.deps.Mapper.Resources(ctx, schema.GroupKind{Group: gv.Group, Kind: kind}, versions...)
	if err != nil {
		return nil, fmt.Errorf("no resource of kind %s: %w", kind, err)
	}
	return resources, nil
}

// readJob reads the scaler's job from etcd, bounded by EtcdTimeout.
func (c *Controller) readJob(ctx context.Context, es *v1alpha1.ElasticScaler) (jobstatus.Snapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.EtcdTimeout)
	defer cancel()
	return jobstatus.Read(ctx, c.deps.Etcd, jobNamespace(es), es.Spec.Job.Name)
}

// newestObservation is the time of the newest measurement in hist.
func newestObservation(hist []v1alpha1.WorldSizeThroughput) time.Time {
	var t time.Time
	for _, h := range hist {
		if h.LastObservedTime.After(t) {
			t = h.LastObservedTime.Time
		}
	}
	return t
}

// maxConditionMessage is metav1.Condition's bound on a message.
const maxConditionMessage = 32768

// reasonPattern is metav1.Condition's rule for a reason.
var reasonPattern = regexp.MustCompile(`^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`)

// conditionReason is reason when the API server takes it for a
// condition's, else fallback: a policy's odd reason must not make the
// status unwritable.
func conditionReason(reason, fallback string) string {
	if len(reason) <= 1024 && reasonPattern.MatchString(reason) {
		return reason
	}
	return fallback
}
