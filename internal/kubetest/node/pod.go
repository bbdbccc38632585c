package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v4"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/ringside/ringside/internal/kubetest/podnet"
)

// kind is a container's role in the pod's lifecycle.
type kind int

const (
	initKind    kind = iota // runs to completion before the next
	sidecarKind             // an init container with restartPolicy Always
	regularKind
)

// Restart back-off: the kubelet's doubles from 10 s to 5 min; tests want
// restarts in well under a second, the doubling kept.
const (
	backoffFirst = 200 * time.Millisecond
	backoffMax   = 5 * time.Second
	backoffReset = 10 * time.Second // a run this long resets the back-off
)

// newBackoff doubles from backoffFirst to backoffMax without jitter, as
// the kubelet's restart back-off does.
func newBackoff() *backoff.ExponentialBackOff {
	return backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(backoffFirst), backoff.WithMaxInterval(backoffMax),
		backoff.WithMultiplier(2), backoff.WithRandomizationFactor(0), backoff.WithMaxElapsedTime(0))
}

// podWorker runs one pod from its binding to its deletion.
type podWorker struct {
	a    *Agent
	uid  types.UID
	spec *corev1.Pod // as first seen; the agent reads only what cannot change
	dir  string

	mu          sync.Mutex
	latest      *corev1.Pod
	att         *podnet.Attachment
	vols        map[string]string
	containers  []*container // init containers in order, then regular ones
	phase       corev1.PodPhase
	initialized bool
	unrunnable  error
	startTime   metav1.Time
	conds       map[corev1.PodConditionType]corev1.PodCondition

	dirty    chan struct{} // the status changed and wants posting
	end      chan struct{} // closed when the pod must stop
	endOnce  sync.Once
	grace    atomic.Int64  // nanoseconds, set before end closes
	killNow  chan struct{} // closed by the agent's Stop: no grace
	killOnce sync.Once
	objGone  atomic.Bool // the object is deleted: nothing to post
	noAPI    atomic.Bool // the agent stops: no API calls
	postMu   sync.Mutex
	done     chan struct{}
}

func newPodWorker(a *Agent, p *corev1.Pod) *podWorker {
	w := &podWorker{
		a: a, uid: p.UID, spec: p.DeepCopy(), latest: p,
		dir:   filepath.Join(a.cfg.Dir, "pods", p.Namespace+"_"+p.Name+"_"+string(p.UID)),
		phase: corev1.PodPending,
		conds: map[corev1.PodConditionType]corev1.PodCondition{},
		dirty: make(chan struct{}, 1), end: make(chan struct{}), killNow: make(chan struct{}),
		done: make(chan struct{}),
	}
	for _, c := range p.Spec.InitContainers {
		k := initKind
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			k = sidecarKind
		}
		w.containers = append(w.containers, newContainer(c, k))
	}
	for _, c := range p.Spec.Containers {
		w.containers = append(w.containers, newContainer(c, regularKind))
	}
	return w
}

// update takes the informer's newest copy; a deletion timestamp starts
// the graceful stop.
func (w *podWorker) update(p *corev1.Pod) {
	w.mu.Lock()
	w.latest = p
	w.mu.Unlock()
	if p.DeletionTimestamp != nil {
		grace := 30 * time.Second
		if p.DeletionGracePeriodSeconds != nil {
			grace = time.Duration(*p.DeletionGracePeriodSeconds) * time.Second
		}
		w.stop(grace)
	}
}

// deleted: the object was removed (a force delete): stop with the pod's
// grace, with nothing left to post or delete.
func (w *podWorker) deleted() {
	w.objGone.Store(true)
	w.stop(time.Duration(ptr.Deref(w.spec.Spec.TerminationGracePeriodSeconds, 30)) * time.Second)
}

// shutdown kills the pod at once and waits for it: the agent stops.
func (w *podWorker) shutdown() {
	w.noAPI.Store(true)
	w.stop(0)
	w.killOnce.Do(func() { close(w.killNow) })
	<-w.done
}

func (w *podWorker) stop(grace time.Duration) {
	w.endOnce.Do(func() {
		w.grace.Store(int64(grace))
		close(w.end)
	})
}

func (w *podWorker) changed() {
	select {
	case w.dirty <- struct{}{}:
	default:
	}
}

func (w *podWorker) ended() bool { return closed(w.end) }

// closed reports, without blocking, whether ch is closed.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// run is the pod's life: checks, network, volumes, init containers in
// order, the regular containers, then the stop and the deletion.
func (w *podWorker) run() {
	defer close(w.done)
	ctx, cancel := context.WithCancel(w.a.ctx)
	statusDone := make(chan struct{})
	go func() { defer close(statusDone); w.postLoop(ctx) }()
	defer func() { cancel(); <-statusDone }()
	log := w.a.log.With("pod", w.spec.Namespace+"/"+w.spec.Name, "node", w.spec.Spec.NodeName)

	w.mu.Lock()
	w.startTime = metav1.Now()
	w.mu.Unlock()
	if err := w.check(); err != nil {
		log.Warn("node agent: pod cannot run here", "err", err)
		w.setUnrunnable(err)
		w.event(ctx, corev1.EventTypeWarning, "Failed", err.Error())
		<-w.end
		w.finish(ctx, log)
		return
	}
	att, err := w.a.cfg.Network.Attach(ctx)
	if err != nil {
		w.setUnrunnable(err)
		w.event(ctx, corev1.EventTypeWarning, "FailedCreatePodSandBox", err.Error())
		<-w.end
		w.finish(ctx, log)
		return
	}
	defer w.a.cfg.Network.Detach(context.WithoutCancel(ctx), att)
	w.mu.Lock()
	w.att = att
	w.mu.Unlock()
	if !w.mountVolumes(ctx) {
		w.finish(ctx, log)
		return
	}
	w.changed()
	if w.runInit(ctx) {
		w.runRegular(ctx)
	}
	w.teardown(log)
	w.finish(ctx, log)
}

// check refuses, before anything starts, what can never run here: an
// unmapped image, an unknown command, an unsupported volume or probe, a
// rule that restarts the whole pod in place.
func (w *podWorker) check() error {
	for _, v := range w.spec.Spec.Volumes {
		s := v.VolumeSource
		if s.EmptyDir == nil && s.HostPath == nil && s.Secret == nil && s.ConfigMap == nil && s.DownwardAPI == nil && s.Projected == nil {
			return fmt.Errorf("volume %q: only emptyDir, hostPath, secret, configMap, downwardAPI and projected volumes run here", v.Name)
		}
	}
	for _, c := range w.containers {
		if _, err := w.resolve(&c.spec, map[string]string{}); err != nil {
			return fmt.Errorf("container %q: %w", c.spec.Name, err)
		}
		for _, p := range []*corev1.Probe{c.spec.StartupProbe, c.spec.ReadinessProbe, c.spec.LivenessProbe} {
			if p != nil && p.GRPC != nil {
				return fmt.Errorf("container %q: gRPC probes do not run here", c.spec.Name)
			}
		}
		for _, r := range c.spec.RestartPolicyRules {
			if r.Action == corev1.ContainerRestartRuleActionRestartAllContainers {
				return fmt.Errorf("container %q: restartPolicyRules with action RestartAllContainers do not run here", c.spec.Name)
			}
		}
		if err := w.checkSecurity(&c.spec); err != nil {
			return err
		}
	}
	return nil
}

func (w *podWorker) setUnrunnable(err error) {
	w.mu.Lock()
	w.unrunnable = err
	w.mu.Unlock()
	w.changed()
}

// mountVolumes makes the volumes, retrying (a Secret may come later) until
// it works or the pod stops.
func (w *podWorker) mountVolumes(ctx context.Context) bool {
	var lastErr string
	bo := newBackoff()
	for {
		vols, err := w.volumes(ctx, filepath.Join(w.dir, "volumes"))
		if err == nil {
			w.mu.Lock()
			w.vols, w.unrunnable = vols, nil
			w.mu.Unlock()
			return true
		}
		if err.Error() != lastErr {
			lastErr = err.Error()
			w.setUnrunnable(err)
			w.event(ctx, corev1.EventTypeWarning, "FailedMount", err.Error())
		}
		select {
		case <-w.end:
			return false
		case <-time.After(bo.NextBackOff()):
		}
	}
}

// runInit starts the init containers in order: a sidecar keeps running
// and the next waits for it to have started (its startupProbe passed); an
// ordinary one must exit 0 first. It reports whether the regular
// containers may start.
func (w *podWorker) runInit(ctx context.Context) bool {
	for _, c := range w.containers {
		if c.kind == regularKind {
			break
		}
		w.launch(ctx, c)
		wait := c.exited
		if c.kind == sidecarKind {
			wait = c.startedOnce
		}
		select {
		case <-w.end:
			return false
		case <-wait:
		case <-c.exited:
		}
		if c.kind == initKind && !c.succeeded() {
			w.mu.Lock()
			w.phase = corev1.PodFailed
			w.mu.Unlock()
			w.changed()
			<-w.end
			return false
		}
		if c.kind == sidecarKind && w.ended() {
			return false
		}
	}
	w.mu.Lock()
	w.initialized = true
	w.mu.Unlock()
	w.changed()
	return true
}

// runRegular starts the regular containers and waits until the pod stops,
// or until they all exited for good: then the pod has succeeded or
// failed, its sidecars stop, and the object waits for its deletion.
func (w *podWorker) runRegular(ctx context.Context) {
	var regular []*container
	for _, c := range w.containers {
		if c.kind == regularKind {
			regular = append(regular, c)
			w.launch(ctx, c)
		}
	}
	w.mu.Lock()
	w.phase = corev1.PodRunning
	w.mu.Unlock()
	w.changed()
	for _, c := range regular {
		select {
		case <-w.end:
			return
		case <-c.exited:
		}
	}
	phase := corev1.PodSucceeded
	for _, c := range regular {
		if !c.succeeded() {
			phase = corev1.PodFailed
		}
	}
	w.teardown(w.a.log)
	w.mu.Lock()
	w.phase = phase
	w.mu.Unlock()
	w.changed()
	<-w.end
}

// teardown stops the containers as the kubelet does: SIGTERM to the
// regular (and running init) containers, then to the sidecars in reverse
// order once those exited, SIGKILL to whatever still runs when the grace
// period is over.
func (w *podWorker) teardown(log *slog.Logger) {
	grace := time.Duration(w.grace.Load())
	if !w.ended() {
		grace = time.Duration(ptr.Deref(w.spec.Spec.TerminationGracePeriodSeconds, 30)) * time.Second
	}
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	expired := false
	stopAll := func(cs []*container) {
		for _, c := range cs {
			c.halt(syscall.SIGTERM)
		}
		for _, c := range cs {
			if !expired {
				select {
				case <-c.exited:
					continue
				case <-deadline.C:
					expired = true
				case <-w.killNow:
					expired = true
				}
			}
			c.halt(syscall.SIGKILL)
			<-c.exited
		}
	}
	var first, sidecars []*container
	for _, c := range w.containers {
		if !c.launched() {
			continue
		}
		if c.kind == sidecarKind {
			sidecars = append([]*container{c}, sidecars...)
		} else {
			first = append(first, c)
		}
	}
	stopAll(first)
	stopAll(sidecars)
	log.Info("node agent: pod stopped", "pod", w.spec.Namespace+"/"+w.spec.Name)
}

// finish posts the final status and deletes the object (grace 0, for the
// same UID only), as the kubelet does once a deleted pod's containers are
// gone, so that its controller can go on.
func (w *podWorker) finish(ctx context.Context, log *slog.Logger) {
	if !w.ended() {
		<-w.end
	}
	if w.noAPI.Load() || w.objGone.Load() {
		return
	}
	w.post(ctx)
	err := w.a.client.CoreV1().Pods(w.spec.Namespace).Delete(ctx, w.spec.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0),
		Preconditions:      &metav1.Preconditions{UID: &w.uid},
	})
	// NotFound: a terminal pod's deletion is immediate, nothing waits.
	if err != nil && ctx.Err() == nil && !apierrors.IsNotFound(err) {
		log.Warn("node agent: deleting a stopped pod", "pod", w.spec.Namespace+"/"+w.spec.Name, "err", err)
	}
	_ = os.RemoveAll(filepath.Join(w.dir, "volumes"))
}

// event records an Event on the pod, as the kubelet reports.
func (w *podWorker) event(ctx context.Context, typ, reason, msg string) {
	if w.noAPI.Load() {
		return
	}
	now := metav1.Now()
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: w.spec.Name + ".", Namespace: w.spec.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: w.spec.Namespace,
			Name: w.spec.Name, UID: w.uid},
		Type: typ, Reason: reason, Message: msg, Count: 1,
		FirstTimestamp: now, LastTimestamp: now,
		Source:              corev1.EventSource{Component: "kubelet", Host: w.spec.Spec.NodeName},
		ReportingController: "kubelet", ReportingInstance: w.spec.Spec.NodeName,
	}
	if _, err := w.a.client.CoreV1().Events(w.spec.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil && ctx.Err() == nil {
		w.a.log.Warn("node agent: recording an event", "pod", w.spec.Name, "reason", reason, "err", err)
	}
}

func (w *podWorker) container(name string) *container {
	for _, c := range w.containers {
		if c.spec.Name == name {
			return c
		}
	}
	return nil
}

func (w *podWorker) kill(name string) error {
	c := w.container(name)
	if c == nil {
		return fmt.Errorf("node agent: pod %s has no container %q", w.spec.Name, name)
	}
	if pid := c.pid(); pid > 0 {
		return syscall.Kill(-pid, syscall.SIGKILL)
	}
	return fmt.Errorf("node agent: container %q of %s is not running", name, w.spec.Name)
}

func (w *podWorker) pids() map[string]int {
	m := map[string]int{}
	for _, c := range w.containers {
		if pid := c.pid(); pid > 0 {
			m[c.spec.Name] = pid
		}
	}
	return m
}

// errStart marks a container that could not be started at all.
var errStart = errors.New("start failed")

// startProcess starts one run of c and returns it.
func (w *podWorker) startProcess(ctx context.Context, c *container) (*exec.Cmd, error) {
	env, list, err := w.environment(ctx, &c.spec)
	if err != nil {
		return nil, err
	}
	argv, err := w.resolve(&c.spec, env)
	if err != nil {
		return nil, err
	}
	line, err := w.launcher(&c.spec, argv)
	if err != nil {
		return nil, err
	}
	logFile := w.a.LogFile(w.spec.Namespace, w.spec.Name, c.spec.Name)
	if err := os.MkdirAll(filepath.Dir(logFile), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close() // the child has its own copy
	cmd := exec.Command(line[0], line[1:]...)
	cmd.Env = list
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = f, f
	// Its own process group, so that a stop reaches what it forked; it
	// dies with the agent's process unless it changed its uid.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%w: %v", errStart, err)
	}
	return cmd, nil
}
