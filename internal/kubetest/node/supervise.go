package node

import (
	"context"
	"errors"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// container is one container's state across its runs.
type container struct {
	spec corev1.Container
	kind kind

	startedOnce chan struct{} // closed when a run first counts as started
	firstStart  sync.Once
	exited      chan struct{} // closed when it will run no more
	stopCh      chan struct{} // closed: no more restarts
	stopOnce    sync.Once
	launchedB   bool

	mu       sync.Mutex
	proc     int // pid (and process group) of the current run, 0 when none
	runs     int // runs so far, for container IDs
	started  bool
	ready    bool
	running  *metav1.Time
	term     *corev1.ContainerStateTerminated // the current state when not running
	last     *corev1.ContainerStateTerminated // the previous run's end
	restarts int32
	waiting  string // reason while neither running nor terminated
	waitMsg  string
}

func newContainer(c corev1.Container, k kind) *container {
	return &container{spec: c, kind: k, startedOnce: make(chan struct{}), exited: make(chan struct{}), stopCh: make(chan struct{})}
}

func (c *container) pid() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.proc
}

// launch marks c as launched (teardown waits for it from then on) and
// runs its supervisor.
func (w *podWorker) launch(ctx context.Context, c *container) {
	c.mu.Lock()
	c.launchedB = true
	c.mu.Unlock()
	w.a.wg.Go(func() { w.supervise(ctx, c) })
}

func (c *container) launched() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.launchedB
}

// succeeded reports whether the last run exited 0.
func (c *container) succeeded() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.term != nil && c.term.ExitCode == 0
}

// halt ends c's restarts and sends sig to its current run.
func (c *container) halt(sig syscall.Signal) {
	c.stopOnce.Do(func() { close(c.stopCh) })
	if pid := c.pid(); pid > 0 {
		_ = syscall.Kill(-pid, sig)
	}
}

func (c *container) stopped() bool { return closed(c.stopCh) }

// restartAfter reports whether c runs again after a run that exited with
// code, as the kubelet decides: a sidecar always, an ordinary init
// container only after a failure, and by shouldRestart.
func (c *container) restartAfter(code int32, pod corev1.RestartPolicy) bool {
	switch c.kind {
	case sidecarKind:
		return true
	case initKind:
		return code != 0 && shouldRestart(&c.spec, pod, code)
	}
	return shouldRestart(&c.spec, pod, code)
}

// shouldRestart is the kubelet's ContainerShouldRestart (ContainerRestartRules,
// on by default since Kubernetes 1.35): a container with a restartPolicy of
// its own follows the first of its restartPolicyRules its exit code matches,
// else that policy; any other follows the pod's restartPolicy (Always when
// unset). A RestartAllContainers rule never gets here: check refuses it.
func shouldRestart(c *corev1.Container, pod corev1.RestartPolicy, code int32) bool {
	if c.RestartPolicy != nil {
		for _, r := range c.RestartPolicyRules {
			if r.ExitCodes != nil && exitCodeMatches(r.ExitCodes, code) {
				if r.Action == corev1.ContainerRestartRuleActionRestart {
					return true
				}
				break
			}
		}
		switch *c.RestartPolicy {
		case corev1.ContainerRestartPolicyAlways:
			return true
		case corev1.ContainerRestartPolicyOnFailure:
			return code != 0
		case corev1.ContainerRestartPolicyNever:
			return false
		}
	}
	switch pod {
	case corev1.RestartPolicyOnFailure:
		return code != 0
	case corev1.RestartPolicyNever:
		return false
	}
	return true
}

func exitCodeMatches(e *corev1.ContainerRestartRuleOnExitCodes, code int32) bool {
	in := slices.Contains(e.Values, code)
	switch e.Operator {
	case corev1.ContainerRestartRuleOnExitCodesOpIn:
		return in
	case corev1.ContainerRestartRuleOnExitCodesOpNotIn:
		return !in
	}
	return false
}

// supervise runs c, again after each exit its policy restarts, with a
// doubling back-off, until it is done or halted.
func (w *podWorker) supervise(ctx context.Context, c *container) {
	defer close(c.exited)
	bo := newBackoff()
	for {
		if c.stopped() {
			return
		}
		began := time.Now()
		code, err := w.runOnce(ctx, c)
		if errors.Is(err, errConfig) {
			code = -1 // not a run: try again, restart count unchanged
		}
		w.changed()
		if c.stopped() || (code >= 0 && !c.restartAfter(code, w.spec.Spec.RestartPolicy)) {
			return
		}
		if time.Since(began) > backoffReset {
			bo.Reset()
		}
		delay := bo.NextBackOff()
		c.mu.Lock()
		if code >= 0 {
			c.restarts++
			c.waiting, c.waitMsg = "CrashLoopBackOff", "back-off "+delay.String()+" restarting failed container "+c.spec.Name
		}
		c.mu.Unlock()
		w.changed()
		select {
		case <-c.stopCh:
			return
		case <-time.After(delay):
		}
	}
}

// errConfig is a container that could not be configured (a missing
// Secret key...): the kubelet's CreateContainerConfigError.
var errConfig = errors.New("container config")

// runOnce starts c, runs its probes and waits for it to exit, returning
// its exit code (128+signal when killed).
func (w *podWorker) runOnce(ctx context.Context, c *container) (int32, error) {
	cmd, err := w.startProcess(ctx, c)
	if err != nil && !errors.Is(err, errStart) {
		c.mu.Lock()
		c.waiting, c.waitMsg = "CreateContainerConfigError", err.Error()
		c.mu.Unlock()
		return -1, errConfig
	}
	now := metav1.Now()
	if err != nil {
		c.mu.Lock()
		c.last, c.term = c.term, &corev1.ContainerStateTerminated{ExitCode: 128, Reason: "StartError", Message: err.Error(), StartedAt: now, FinishedAt: now}
		c.mu.Unlock()
		return 128, err
	}
	pid := cmd.Process.Pid
	c.mu.Lock()
	c.proc, c.running, c.runs = pid, &now, c.runs+1
	c.waiting, c.waitMsg = "", ""
	if c.term != nil {
		c.last = c.term
	}
	c.term, c.ready = nil, false
	c.started = c.spec.StartupProbe == nil
	id := w.containerID(c)
	c.mu.Unlock()
	if c.stopped() { // halted between the check and the start
		_ = syscall.Kill(-pid, syscall.SIGTERM)
	}
	if c.spec.StartupProbe == nil {
		c.firstStart.Do(func() { close(c.startedOnce) })
	}
	w.changed()
	runDone := make(chan struct{})
	var probes sync.WaitGroup
	probes.Go(func() { w.probe(ctx, c, pid, runDone) })
	werr := cmd.Wait()
	// What the main process left in its group dies with it, as with a
	// container's PID namespace.
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	close(runDone)
	probes.Wait()
	code, signal, reason := exitStatus(werr)
	end := metav1.Now()
	c.mu.Lock()
	c.proc, c.running, c.ready, c.started = 0, nil, false, false
	c.term = &corev1.ContainerStateTerminated{ExitCode: code, Signal: signal, Reason: reason,
		StartedAt: now, FinishedAt: end, ContainerID: id}
	c.mu.Unlock()
	return code, nil
}

func (w *podWorker) containerID(c *container) string {
	return "kubetest://" + string(w.uid) + "-" + c.spec.Name + "-" + strconv.Itoa(c.runs)
}

func exitStatus(err error) (code, signal int32, reason string) {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int32(ws.Signal()), int32(ws.Signal()), "Error"
		}
		return int32(ee.ExitCode()), 0, "Error"
	}
	if err != nil {
		return 128, 0, "Error"
	}
	return 0, 0, "Completed"
}
