package kubetest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ringside/ringside/etcdserver"
)

// Options configure a control plane.
type Options struct {
	// Dir holds the run's certificates, kubeconfigs, etcd data and the
	// components' logs. Required.
	Dir string
	// HostIP is the address the API server listens on and advertises:
	// the pod network's host side when pods must reach it (podnet), else
	// 127.0.0.1 (the default).
	HostIP string
	// Progress receives the build's progress (default os.Stderr).
	Progress io.Writer
	// Logger gets the start time and the stop (default slog.Default()).
	Logger *slog.Logger
	// ReadyTimeout bounds the wait for /readyz (default 2 minutes: the
	// three components share 2 cores with the tests under -race).
	ReadyTimeout time.Duration
}

// ControlPlane is a running kube-apiserver, kube-controller-manager and
// kube-scheduler on an embedded etcd.
type ControlPlane struct {
	// Config is an admin (system:masters) client config.
	Config *rest.Config
	// Kubeconfig is the admin kubeconfig file, for commands under test.
	Kubeconfig string
	// HostIP and Port are where the API server listens; Host is its URL.
	HostIP string
	Port   int
	Host   string
	// CAFile is the cluster CA's certificate (it signed the serving
	// certificate and every client certificate).
	CAFile string
	// StartTime is how long Start took once the binaries were built.
	StartTime time.Duration

	dir   string
	bin   string
	etcd  *etcdserver.Server
	procs []*process
	log   *slog.Logger
	// apiArgs are the API server's flags and ready its start timeout,
	// for StartAPIServer.
	apiArgs []string
	ready   time.Duration
}

// process is one running component and its log file.
type process struct {
	name, logFile string
	cmd           *exec.Cmd
	exited        chan struct{}
	err           error // set before exited closes
}

// Start builds the components when the cache lacks them, then starts
// etcd, the API server (waiting for /readyz), the controller manager and
// the scheduler. A failure stops whatever started; its error wraps
// ErrUnavailable when the machine cannot build the components.
func Start(ctx context.Context, opts Options) (*ControlPlane, error) {
	if opts.Dir == "" {
		return nil, errors.New("kubetest: Options.Dir is empty")
	}
	if opts.HostIP == "" {
		opts.HostIP = "127.0.0.1"
	}
	if opts.Progress == nil {
		opts.Progress = os.Stderr
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = 2 * time.Minute
	}
	bin, err := Binaries(ctx, opts.Progress)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	cp := &ControlPlane{HostIP: opts.HostIP, dir: opts.Dir, bin: bin, log: opts.Logger, ready: opts.ReadyTimeout}
	if err := cp.start(ctx, bin, opts); err != nil {
		cp.Stop()
		return nil, fmt.Errorf("%w\n%s", err, cp.Logs(40))
	}
	cp.StartTime = time.Since(start)
	cp.log.Info("kubetest: control plane ready", "host", cp.Host, "start", cp.StartTime.Round(time.Millisecond))
	return cp, nil
}

func (cp *ControlPlane) start(ctx context.Context, bin string, opts Options) error {
	ecfg := etcdserver.EphemeralConfig(filepath.Join(opts.Dir, "etcd"))
	etcd, err := etcdserver.Start(ctx, ecfg)
	if err != nil {
		return err
	}
	cp.etcd = etcd
	c, err := makeCerts(filepath.Join(opts.Dir, "pki"), cp.HostIP)
	if err != nil {
		return err
	}
	cp.CAFile = c.caFile
	if cp.Port, err = freePort(cp.HostIP); err != nil {
		return err
	}
	cp.Host = "https://" + net.JoinHostPort(cp.HostIP, strconv.Itoa(cp.Port))
	if cp.Kubeconfig, err = c.kubeconfig(adminID, cp.Host); err != nil {
		return err
	}
	// The credentials in memory, not as files: client-go watches files for
	// rotation with goroutines that outlive every client.
	var tlsConfig rest.TLSClientConfig
	for _, f := range []struct {
		dst  *[]byte
		path string
	}{
		{&tlsConfig.CAData, c.caFile},
		{&tlsConfig.CertData, filepath.Join(c.dir, adminID.file+".crt")},
		{&tlsConfig.KeyData, filepath.Join(c.dir, adminID.file+".key")},
	} {
		if *f.dst, err = os.ReadFile(f.path); err != nil {
			return fmt.Errorf("kubetest admin credentials: %w", err)
		}
	}
	cp.Config = &rest.Config{
		Host: cp.Host, TLSClientConfig: tlsConfig,
		QPS: 100, Burst: 200, // the tests' clients are the cluster's busiest
	}
	cp.apiArgs = cp.apiserverArgs(c, etcd.Endpoints()[0])
	api, err := cp.run(bin, "kube-apiserver", cp.apiArgs...)
	if err != nil {
		return err
	}
	if err := cp.waitReady(ctx, api, opts.ReadyTimeout); err != nil {
		return err
	}
	kcm, err := c.kubeconfig(managerID, cp.Host)
	if err != nil {
		return err
	}
	if _, err := cp.run(bin, "kube-controller-manager",
		"--kubeconfig="+kcm,
		"--authentication-kubeconfig="+kcm, "--authorization-kubeconfig="+kcm,
		"--bind-address=127.0.0.1", "--secure-port=0",
		"--leader-elect=false",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file="+c.saKey,
		"--root-ca-file="+c.caFile,
		"--controllers=*",
		"--v=2",
	); err != nil {
		return err
	}
	sched, err := c.kubeconfig(schedulerID, cp.Host)
	if err != nil {
		return err
	}
	_, err = cp.run(bin, "kube-scheduler",
		"--kubeconfig="+sched,
		"--authentication-kubeconfig="+sched, "--authorization-kubeconfig="+sched,
		"--bind-address=127.0.0.1", "--secure-port=0",
		"--leader-elect=false",
		"--v=2",
	)
	return err
}

func (cp *ControlPlane) apiserverArgs(c *certs, etcdURL string) []string {
	return []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=" + cp.HostIP,
		"--advertise-address=" + cp.HostIP,
		"--secure-port=" + strconv.Itoa(cp.Port),
		"--cert-dir=" + c.dir,
		"--tls-cert-file=" + c.serverCert,
		"--tls-private-key-file=" + c.servKey,
		"--client-ca-file=" + c.caFile,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + c.saPub,
		"--service-account-signing-key-file=" + c.saKey,
		"--service-cluster-ip-range=" + serviceCIDR,
		"--authorization-mode=Node,RBAC",
		"--allow-privileged=true",
		// Nothing reconciles the kubernetes Service's endpoints to an
		// address that is not the host's: the test's clients use Host.
		"--endpoint-reconciler-type=none",
		// Webhooks named by a Service reach its endpoints (pod IPs)
		// directly: there is no kube-proxy to route its ClusterIP.
		"--enable-aggregator-routing=true",
		"--profiling=false",
		"--v=1",
	}
}

// run starts bin/name with args, its output appended to Dir/name.log.
func (cp *ControlPlane) run(bin, name string, args ...string) (*process, error) {
	logFile := filepath.Join(cp.dir, name+".log")
	f, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("kubetest %s: %w", name, err)
	}
	cmd := exec.Command(filepath.Join(bin, name), args...)
	cmd.Stdout, cmd.Stderr = f, f
	// The components die with the test binary, even a killed one.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("kubetest %s: %w", name, err)
	}
	p := &process{name: name, logFile: logFile, cmd: cmd, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.exited)
	}()
	cp.procs = append(cp.procs, p)
	return p, nil
}

// StopAPIServer stops the kube-apiserver (SIGTERM, SIGKILL after 10 s)
// and leaves the rest running, for a test of what its clients do while
// it is away; StartAPIServer brings it back. It is not safe to call
// concurrently with Stop or StartAPIServer.
func (cp *ControlPlane) StopAPIServer() error {
	i := cp.apiServer()
	if i < 0 {
		return errors.New("kubetest: no kube-apiserver to stop")
	}
	cp.procs[i].stop()
	return nil
}

// StartAPIServer starts the kube-apiserver stopped by StopAPIServer again,
// with the same flags: the same port, certificates and etcd (nothing of
// the cluster's state is lost), and waits until it is ready.
func (cp *ControlPlane) StartAPIServer(ctx context.Context) error {
	i := cp.apiServer()
	if i < 0 {
		return errors.New("kubetest: no kube-apiserver to start")
	}
	select {
	case <-cp.procs[i].exited:
	default:
		return errors.New("kubetest: the kube-apiserver is running: stop it first")
	}
	p, err := cp.run(cp.bin, "kube-apiserver", cp.apiArgs...)
	if err != nil {
		return err
	}
	// In the place of the old one: Stop stops the components in reverse
	// order of start, the API server last.
	cp.procs = cp.procs[:len(cp.procs)-1]
	cp.procs[i] = p
	return cp.waitReady(ctx, p, cp.ready)
}

func (cp *ControlPlane) apiServer() int {
	for i, p := range cp.procs {
		if p.name == "kube-apiserver" {
			return i
		}
	}
	return -1
}

// stop sends SIGTERM and waits for the process to exit, killing it after
// 10 s.
func (p *process) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// waitReady polls /readyz until the API server api answers ok, it exits
// or timeout passes.
func (cp *ControlPlane) waitReady(ctx context.Context, api *process, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cs, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		return fmt.Errorf("kubetest client: %w", err)
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err == nil && string(body) == "ok" {
			return nil
		}
		last = err
		select {
		case <-api.exited:
			return fmt.Errorf("kubetest: kube-apiserver exited while starting: %v", api.err)
		case <-ctx.Done():
			return fmt.Errorf("kubetest: kube-apiserver not ready after %s: %v", timeout, last)
		case <-tick.C:
		}
	}
}

// Stop stops the components (SIGTERM, SIGKILL after 10 s) in reverse
// order of start, then etcd. It may be called more than once.
func (cp *ControlPlane) Stop() {
	for i := len(cp.procs) - 1; i >= 0; i-- {
		cp.procs[i].stop()
	}
	cp.procs = nil
	if cp.etcd != nil {
		cp.etcd.Close()
		cp.etcd = nil
	}
}

// Exited returns the names of components that are no longer running:
// a test that sees the cluster misbehave checks this first.
func (cp *ControlPlane) Exited() []string {
	var names []string
	for _, p := range cp.procs {
		select {
		case <-p.exited:
			names = append(names, p.name)
		default:
		}
	}
	return names
}

// LogFiles returns each component's log file by name.
func (cp *ControlPlane) LogFiles() map[string]string {
	m := map[string]string{}
	for _, c := range Components {
		m[c] = filepath.Join(cp.dir, c+".log")
	}
	return m
}

// Logs returns the last n lines of each component's log, for a failing
// test to print.
func (cp *ControlPlane) Logs(n int) string {
	var out string
	for _, c := range Components {
		lines, err := tail(filepath.Join(cp.dir, c+".log"), n)
		if err != nil {
			continue
		}
		out += fmt.Sprintf("--- %s (last %d lines)\n%s", c, n, lines)
	}
	return out
}

func tail(path string, n int) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	var ring []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		ring = append(ring, sc.Text())
		if len(ring) > n {
			ring = ring[1:]
		}
	}
	var s string
	for _, l := range ring {
		s += l + "\n"
	}
	return s, nil
}

// freePort asks the kernel for a port free on ip.
func freePort(ip string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return 0, fmt.Errorf("kubetest port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
