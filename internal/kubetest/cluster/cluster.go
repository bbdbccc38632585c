// Package cluster starts the whole test cluster in one call: the pod
// network (podnet), the control plane on its host address (kubetest) and
// the node agent with its Nodes (node), the way a test package's TestMain
// wants them, and stops them in the reverse order.
//
//	c, err := cluster.Start(ctx, cluster.Config{Dir: dir, Images: images, Nodes: nodes})
//	...           // each test: kubetest.Require(t, err)
//	defer c.Stop(ctx)
package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/ringside/ringside/internal/kubetest"
	"github.com/ringside/ringside/internal/kubetest/node"
	"github.com/ringside/ringside/internal/kubetest/podnet"
)

// Config configures a cluster.
type Config struct {
	// Dir holds the control plane's files and the agent's volumes and
	// logs. Required.
	Dir string
	// Images and Nodes are the agent's (node.Config).
	Images map[string]string
	Nodes  []node.NodeSpec
	// Logger gets the agent's and the network's logs (default: warnings
	// and errors to stderr).
	Logger *slog.Logger
}

// Cluster is a running control plane with its nodes.
type Cluster struct {
	ControlPlane *kubetest.ControlPlane
	Network      *podnet.Network
	Agent        *node.Agent
	// Client is an admin clientset.
	Client kubernetes.Interface
}

// Start brings the cluster up and returns once every node is schedulable.
// Its error wraps kubetest.ErrUnavailable when the machine cannot run it.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	c := &Cluster{}
	var err error
	if c.Network, err = podnet.New(ctx, cfg.Logger); err != nil {
		return nil, err
	}
	c.ControlPlane, err = kubetest.Start(ctx, kubetest.Options{Dir: filepath.Join(cfg.Dir, "cp"), HostIP: c.Network.HostIP()})
	if err != nil {
		c.Stop(ctx)
		return nil, err
	}
	cp := c.ControlPlane
	c.Agent, err = node.Start(ctx, node.Config{
		Rest: cp.Config, Network: c.Network, Dir: filepath.Join(cfg.Dir, "agent"),
		APIHost: cp.HostIP, APIPort: cp.Port, Logger: cfg.Logger,
		Images: cfg.Images, Nodes: cfg.Nodes,
	})
	if err == nil {
		c.Client, err = kubernetes.NewForConfig(cp.Config)
	}
	if err == nil {
		err = schedulable(ctx, c.Client, len(cfg.Nodes))
	}
	if err != nil {
		c.Stop(ctx)
		return nil, err
	}
	return c, nil
}

// Stop stops the agent (its pods killed), the control plane and the
// network, whatever of them started.
func (c *Cluster) Stop(ctx context.Context) {
	if c.Agent != nil {
		c.Agent.Stop()
	}
	if c.ControlPlane != nil {
		c.ControlPlane.Stop()
	}
	if c.Network != nil {
		c.Network.Close(ctx)
	}
}

// Logs returns the tails of the components' and the containers' logs,
// for a failing test package to print.
func (c *Cluster) Logs() string {
	return c.ControlPlane.Logs(40) + c.Agent.Logs(20)
}

// schedulable waits until n nodes have lost the not-ready taint that
// nodes are born with (the node lifecycle controller lifts it once it has
// seen them Ready), so that the first test does not pay for it.
func schedulable(ctx context.Context, client kubernetes.Interface, n int) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	lw := cache.NewListWatchFromClient(client.CoreV1().RESTClient(), "nodes", "", fields.Everything())
	ready := map[string]bool{}
	_, err := watchtools.UntilWithSync(ctx, lw, &corev1.Node{}, nil, func(e watch.Event) (bool, error) {
		if nd, ok := e.Object.(*corev1.Node); ok {
			ready[nd.Name] = !slices.ContainsFunc(nd.Spec.Taints, func(t corev1.Taint) bool { return t.Key == corev1.TaintNodeNotReady })
		}
		count := 0
		for _, r := range ready {
			if r {
				count++
			}
		}
		return count == n, nil
	})
	if err != nil {
		return fmt.Errorf("cluster: nodes schedulable: %w", err)
	}
	return nil
}
