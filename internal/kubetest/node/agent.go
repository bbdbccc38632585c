package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/ringside/ringside/internal/kubetest"
	"github.com/ringside/ringside/internal/kubetest/podnet"
)

// Config configures an agent.
type Config struct {
	// Rest is the client config the agent acts with (the control plane's
	// admin config: the agent is trusted as a kubelet is).
	Rest *rest.Config
	// Network gives each pod its namespace and address.
	Network *podnet.Network
	// Nodes are the nodes the agent registers and runs pods for.
	Nodes []NodeSpec
	// Images maps an image reference prefix (the longest one that
	// matches wins) to the local executable that stands for the image's
	// entrypoint. An empty executable is a base image: its containers
	// must name a command, found on the host's PATH.
	Images map[string]string
	// Dir holds the pods' volumes and the containers' logs.
	Dir string
	// APIHost and APIPort are what pods get as KUBERNETES_SERVICE_HOST
	// and _PORT: the API server itself, since no kube-proxy routes the
	// kubernetes Service's ClusterIP.
	APIHost string
	APIPort int
	// Logger gets the agent's logs (default slog.Default()).
	Logger *slog.Logger
}

// NodeSpec is one node to register.
type NodeSpec struct {
	Name string
	// Zone and Region become topology.kubernetes.io/zone and /region.
	Zone, Region string
	// Labels are added to the node's (kubernetes.io/hostname, os, arch
	// are set already).
	Labels map[string]string
	// Capacity is the node's capacity and allocatable: cpu, memory, pods
	// and extended resources such as nvidia.com/gpu. Missing cpu, memory
	// and pods default to 8, 32Gi and 110.
	Capacity corev1.ResourceList
	// Taints are the node's taints.
	Taints []corev1.Taint
}

// Agent runs the pods bound to its nodes.
type Agent struct {
	cfg    Config
	client kubernetes.Interface
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	workers map[string]*podWorker // by namespace/name
	mounts  *mountPoints
}

// Start registers the nodes, starts their heartbeats and watches the pods
// bound to them. Stop undoes it.
func Start(ctx context.Context, cfg Config) (*Agent, error) {
	if cfg.Rest == nil || cfg.Network == nil || cfg.Dir == "" || len(cfg.Nodes) == 0 {
		return nil, errors.New("node agent: Rest, Network, Dir and Nodes are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	for _, tool := range []string{"nsenter", "unshare", "setpriv", "mount"} {
		if _, err := lookPath(tool); err != nil {
			return nil, fmt.Errorf("%w: the node agent needs util-linux's %s: %v", kubetest.ErrUnavailable, tool, err)
		}
	}
	client, err := kubernetes.NewForConfig(cfg.Rest)
	if err != nil {
		return nil, fmt.Errorf("node agent client: %w", err)
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	a := &Agent{cfg: cfg, client: client, log: cfg.Logger, ctx: runCtx, cancel: cancel,
		workers: map[string]*podWorker{}}
	a.mounts = loadMountPoints(filepath.Join(os.TempDir(), "ringside-podnet-"+strings.TrimSuffix(cfg.Network.Subnet(), "/24")+".mounts"))
	a.mounts.removeAll(a.log) // what a crashed run left
	for _, n := range cfg.Nodes {
		if err := a.register(ctx, n); err != nil {
			cancel()
			return nil, err
		}
	}
	for _, n := range cfg.Nodes {
		a.wg.Go(func() { a.heartbeat(runCtx, n.Name) })
		if err := a.watch(ctx, n.Name); err != nil {
			a.Stop()
			return nil, err
		}
	}
	return a, nil
}

// watch runs an informer on the pods bound to node, as the kubelet does.
func (a *Agent) watch(ctx context.Context, node string) error {
	f := informers.NewSharedInformerFactoryWithOptions(a.client, 0, informers.WithTweakListOptions(
		func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", node).String()
		}))
	inf := f.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { a.podChanged(obj.(*corev1.Pod)) },
		UpdateFunc: func(_, obj any) { a.podChanged(obj.(*corev1.Pod)) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				a.podGone(p)
			}
		},
	}); err != nil {
		return fmt.Errorf("node agent informer: %w", err)
	}
	f.Start(a.ctx.Done())
	a.wg.Go(func() { f.Shutdown() }) // returns once Stop cancels a.ctx and the informer ends
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return fmt.Errorf("node agent: pod informer of %s did not sync", node)
	}
	return nil
}

func (a *Agent) podChanged(p *corev1.Pod) {
	key := p.Namespace + "/" + p.Name
	a.mu.Lock()
	w := a.workers[key]
	if w != nil && w.uid != p.UID {
		// The same name for a new pod (a StatefulSet's next one) while the
		// old one's teardown finishes: the new one waits for it.
		w = nil
	}
	if w == nil {
		if a.ctx.Err() != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			a.mu.Unlock()
			return
		}
		prev := a.workers[key]
		w = newPodWorker(a, p)
		a.workers[key] = w
		a.wg.Go(func() {
			if prev != nil {
				<-prev.done
			}
			w.run()
			a.mu.Lock()
			if a.workers[key] == w {
				delete(a.workers, key)
			}
			a.mu.Unlock()
		})
	}
	a.mu.Unlock()
	w.update(p)
}

func (a *Agent) podGone(p *corev1.Pod) {
	a.mu.Lock()
	w := a.workers[p.Namespace+"/"+p.Name]
	a.mu.Unlock()
	if w != nil && w.uid == p.UID {
		w.deleted()
	}
}

// Stop kills every pod's processes at once (the test is over: no grace),
// removes their namespaces and the mount points it created, and stops
// the heartbeats and informers. Pod objects are left to the control plane
// that goes down next.
func (a *Agent) Stop() {
	a.mu.Lock()
	a.cancel() // under the lock: podChanged starts no worker after this
	ws := make([]*podWorker, 0, len(a.workers))
	for _, w := range a.workers {
		ws = append(ws, w)
	}
	a.mu.Unlock()
	for _, w := range ws {
		w.shutdown()
	}
	a.wg.Wait()
	a.mounts.removeAll(a.log)
}

// worker returns the running worker of namespace/name.
func (a *Agent) worker(namespace, name string) (*podWorker, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	w := a.workers[namespace+"/"+name]
	if w == nil {
		return nil, fmt.Errorf("node agent: no pod %s/%s runs here", namespace, name)
	}
	return w, nil
}

// Kill sends SIGKILL to the processes of one container of a pod: its
// restart is then up to the pod's restartPolicy, as after a crash.
func (a *Agent) Kill(namespace, pod, container string) error {
	w, err := a.worker(namespace, pod)
	if err != nil {
		return err
	}
	return w.kill(container)
}

// Exec runs command in a running container's namespaces, mounts, user
// and capabilities (kubectl exec's place) and returns its output, stdout
// and stderr together; a non-zero exit is an *exec.ExitError.
func (a *Agent) Exec(ctx context.Context, namespace, pod, container string, command ...string) (string, error) {
	w, err := a.worker(namespace, pod)
	if err != nil {
		return "", err
	}
	c := w.container(container)
	if c == nil || c.pid() == 0 {
		return "", fmt.Errorf("node agent: container %q of %s/%s is not running", container, namespace, pod)
	}
	var out bytes.Buffer
	err = w.exec(ctx, c, command, &out)
	return out.String(), err
}

// PIDs returns the main process of each running container of a pod, by
// container name.
func (a *Agent) PIDs(namespace, pod string) (map[string]int, error) {
	w, err := a.worker(namespace, pod)
	if err != nil {
		return nil, err
	}
	return w.pids(), nil
}

// LogFile is where a container's output goes (appended across restarts).
func (a *Agent) LogFile(namespace, pod, container string) string {
	return filepath.Join(a.cfg.Dir, "logs", namespace+"_"+pod+"_"+container+".log")
}

// Log returns what a container printed so far, all its runs together.
func (a *Agent) Log(namespace, pod, container string) (string, error) {
	b, err := os.ReadFile(a.LogFile(namespace, pod, container))
	return string(b), err
}

// Logs returns the last n lines of every container log, for a failing
// test to print.
func (a *Agent) Logs(n int) string {
	files, _ := filepath.Glob(filepath.Join(a.cfg.Dir, "logs", "*.log"))
	sort.Strings(files)
	var b strings.Builder
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		lines = lines[max(0, len(lines)-n):]
		fmt.Fprintf(&b, "--- %s\n%s\n", filepath.Base(f), strings.Join(lines, "\n"))
	}
	return b.String()
}

// image resolves an image to its local entrypoint: the longest prefix of
// Images that matches it.
func (a *Agent) image(ref string) (string, bool) {
	keys := make([]string, 0, len(a.cfg.Images))
	for k := range a.cfg.Images {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(x, y string) int { return len(y) - len(x) })
	for _, k := range keys {
		if strings.HasPrefix(ref, k) {
			return a.cfg.Images[k], true
		}
	}
	return "", false
}
