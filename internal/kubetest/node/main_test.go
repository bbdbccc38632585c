package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ringside/ringside/internal/kubetest"
	kcluster "github.com/ringside/ringside/internal/kubetest/cluster"
	"github.com/ringside/ringside/internal/kubetest/node"
	"github.com/ringside/ringside/internal/kubetest/podnet"
)

// The images of the tests' pods: a base image (commands from the host)
// and the test binary itself, run in helper mode.
const (
	baseImage   = "kubetest.local/base:1"
	helperImage = "kubetest.local/helper:1"
	helperEnv   = "KUBETEST_NODE_HELPER"
)

// cluster is the package's control plane, pod network and node agent.
type cluster struct {
	*kcluster.Cluster
	cp     *kubetest.ControlPlane
	net    *podnet.Network
	agent  *node.Agent
	client kubernetes.Interface
}

var (
	env    *cluster
	envErr error
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(helper(os.Args[1:]))
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "kubetest-node-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	env, envErr = start(ctx, dir)
	code := m.Run()
	if env != nil {
		if code != 0 {
			fmt.Fprint(os.Stderr, env.Logs())
		}
		env.Stop(ctx)
	}
	if code == 0 {
		if err := goleak.Find(kubetest.LeakOptions...); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines left behind:", err)
			return 1
		}
	}
	return code
}

func start(ctx context.Context, dir string) (*cluster, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	c, err := kcluster.Start(ctx, kcluster.Config{
		Dir:    dir,
		Images: map[string]string{baseImage: "", helperImage: self},
		Nodes: []node.NodeSpec{
			{Name: "node-a", Zone: "zone-a", Region: "region-1", Labels: map[string]string{"ringside.dev/pool": "train"},
				Capacity: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")}},
			{Name: "node-b", Zone: "zone-b", Region: "region-1",
				Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), "nvidia.com/gpu": resource.MustParse("8")}},
		},
	})
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "kubetest: control plane started in %s\n", c.ControlPlane.StartTime.Round(time.Millisecond))
	return &cluster{Cluster: c, cp: c.ControlPlane, net: c.Network, agent: c.Agent, client: c.Client}, nil
}

// helper is the helper image's entrypoint: serve PORT answers /env with
// the environment and /file?path= with a file; get URL prints a body.
func helper(args []string) int {
	if len(args) < 1 {
		fmt.Fprintln(os.Stderr, "helper: serve PORT | get URL | whoami")
		return 2
	}
	switch args[0] {
	case "serve":
		mux := http.NewServeMux()
		mux.HandleFunc("/env", func(w http.ResponseWriter, r *http.Request) {
			m := map[string]string{}
			for _, kv := range os.Environ() {
				k, v, _ := strings.Cut(kv, "=")
				m[k] = v
			}
			json.NewEncoder(w).Encode(m)
		})
		mux.HandleFunc("/file", func(w http.ResponseWriter, r *http.Request) {
			b, err := os.ReadFile(r.URL.Query().Get("path"))
			if err != nil {
				http.Error(w, err.Error(), http.StatusNotFound)
				return
			}
			w.Write(b)
		})
		srv := &http.Server{Addr: ":" + args[1], Handler: mux}
		go func() {
			sig := make(chan os.Signal, 1)
			signal.Notify(sig, syscall.SIGTERM)
			<-sig
			fmt.Println("helper: SIGTERM, shutting down")
			srv.Close()
		}()
		fmt.Println("helper: serving on", srv.Addr)
		if err := srv.ListenAndServe(); err != http.ErrServerClosed {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	case "whoami":
		// In-cluster config: the projected token and CA, and the API
		// server's address in KUBERNETES_SERVICE_HOST/PORT.
		cfg, err := rest.InClusterConfig()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(context.Background(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Println("user", review.Status.UserInfo.Username)
		return 0
	case "get":
		resp, err := http.Get(args[1])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		fmt.Printf("status %d\n%s\n", resp.StatusCode, b)
		return 0
	}
	return 2
}
