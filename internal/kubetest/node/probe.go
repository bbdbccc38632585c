package node

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// probe runs one run's probes as the kubelet does: the startup probe until
// it passes (the run is "started" then; past its failure threshold the run
// is killed), then readiness and liveness side by side (liveness past its
// threshold kills the run, which restarts per policy). Without a
// readiness probe a started container is ready.
func (w *podWorker) probe(ctx context.Context, c *container, pid int, runDone <-chan struct{}) {
	kill := func(why string) {
		w.event(ctx, corev1.EventTypeWarning, "Unhealthy", fmt.Sprintf("container %s %s; killing it", c.spec.Name, why))
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
	if p := c.spec.StartupProbe; p != nil {
		if !w.probeLoop(ctx, c, p, runDone, func(ok bool) bool {
			if ok {
				c.mu.Lock()
				c.started = true
				c.mu.Unlock()
				c.firstStart.Do(func() { close(c.startedOnce) })
				w.changed()
				return false
			}
			return true
		}, func() { kill("failed its startup probe") }) {
			return
		}
	}
	var wg sync.WaitGroup
	if p := c.spec.ReadinessProbe; p != nil {
		wg.Go(func() {
			w.probeLoop(ctx, c, p, runDone, func(ok bool) bool {
				c.mu.Lock()
				changed := c.ready != ok
				c.ready = ok
				c.mu.Unlock()
				if changed {
					w.changed()
				}
				return true
			}, func() {})
		})
	} else {
		c.mu.Lock()
		c.ready = true
		c.mu.Unlock()
		w.changed()
	}
	if p := c.spec.LivenessProbe; p != nil {
		wg.Go(func() {
			w.probeLoop(ctx, c, p, runDone, func(bool) bool { return true }, func() { kill("failed its liveness probe") })
		})
	}
	wg.Wait()
}

// probeLoop runs p every period after its initial delay and calls result
// with the outcome once successThreshold successes or failureThreshold
// failures in a row are reached (result returns whether to go on);
// exhausted is called on the failures. It returns false when the run
// ended first.
func (w *podWorker) probeLoop(ctx context.Context, c *container, p *corev1.Probe, runDone <-chan struct{},
	result func(ok bool) bool, exhausted func()) bool {
	period := time.Duration(max(p.PeriodSeconds, 1)) * time.Second
	if p.PeriodSeconds == 0 {
		period = 10 * time.Second
	}
	successes, failures := max(p.SuccessThreshold, 1), max(p.FailureThreshold, 1)
	if p.FailureThreshold == 0 {
		failures = 3
	}
	wait := time.Duration(p.InitialDelaySeconds) * time.Second
	var okRun, failRun int32
	for {
		select {
		case <-runDone:
			return false
		case <-time.After(wait):
		}
		wait = period
		if err := w.probeOnce(ctx, c, p, runDone); err == nil {
			okRun, failRun = okRun+1, 0
			if okRun >= successes && !result(true) {
				return true
			}
		} else {
			okRun, failRun = 0, failRun+1
			if failRun >= failures {
				exhausted()
				if !result(false) {
					return true
				}
			}
		}
	}
}

// probeOnce runs one probe against the pod's IP (or, for exec, in the
// container) within its timeout.
func (w *podWorker) probeOnce(ctx context.Context, c *container, p *corev1.Probe, runDone <-chan struct{}) error {
	timeout := time.Duration(max(p.TimeoutSeconds, 1)) * time.Second
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	go func() { // a run that ends cuts its probe short
		select {
		case <-runDone:
			cancel()
		case <-ctx.Done():
		}
	}()
	switch h := p.ProbeHandler; {
	case h.Exec != nil:
		return w.probeExec(ctx, c, h.Exec.Command)
	case h.HTTPGet != nil:
		return w.probeHTTP(ctx, c, h.HTTPGet)
	case h.TCPSocket != nil:
		port, err := w.port(c, h.TCPSocket.Port)
		if err != nil {
			return err
		}
		host := h.TCPSocket.Host
		if host == "" {
			host = w.att.IP
		}
		conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			return err
		}
		return conn.Close()
	}
	return fmt.Errorf("probe with no handler")
}

func (w *podWorker) probeExec(ctx context.Context, c *container, command []string) error {
	return w.exec(ctx, c, command, nil)
}

// exec runs command in c's namespaces and identity, as kubectl exec and
// exec probes do, with its output to out (nil: discarded), killed when ctx
// ends.
func (w *podWorker) exec(ctx context.Context, c *container, command []string, out io.Writer) error {
	if len(command) == 0 {
		return fmt.Errorf("exec without a command")
	}
	env, list, err := w.environment(ctx, &c.spec)
	if err != nil {
		return err
	}
	spec := c.spec
	spec.Command, spec.Args = command, nil
	argv, err := w.resolve(&spec, env)
	if err != nil {
		return err
	}
	line, err := w.launcher(&c.spec, argv)
	if err != nil {
		return err
	}
	cmd := exec.Command(line[0], line[1:]...)
	cmd.Env, cmd.Dir = list, "/"
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case err := <-waited:
		return err
	case <-ctx.Done():
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-waited
		return ctx.Err()
	}
}

func (w *podWorker) probeHTTP(ctx context.Context, c *container, h *corev1.HTTPGetAction) error {
	port, err := w.port(c, h.Port)
	if err != nil {
		return err
	}
	host := h.Host
	if host == "" {
		host = w.att.IP
	}
	scheme := "http"
	if h.Scheme == corev1.URISchemeHTTPS {
		scheme = "https"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+net.JoinHostPort(host, strconv.Itoa(port))+h.Path, nil)
	if err != nil {
		return err
	}
	for _, hd := range h.HTTPHeaders {
		req.Header.Add(hd.Name, hd.Value)
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true} // the kubelet does not verify either
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return fmt.Errorf("http probe: status %d", resp.StatusCode)
	}
	return nil
}

// port resolves a probe's port, a number or the name of a container port.
func (w *podWorker) port(c *container, p intstr.IntOrString) (int, error) {
	if p.Type == intstr.Int {
		return p.IntValue(), nil
	}
	for _, cp := range c.spec.Ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort), nil
		}
	}
	return 0, fmt.Errorf("container %s has no port named %q", c.spec.Name, p.StrVal)
}
