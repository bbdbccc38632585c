package e2e

import (
	"context"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringside/ringside/autoscale"
	"github.com/ringside/ringside/autoscale/v1alpha1"
	"github.com/ringside/ringside/internal/testbin"
)

var servingAddr = regexp.MustCompile(`serving metrics and health.* addr=(\S+)`)

// A running controller whose API server goes away says so at once: its
// /readyz fails naming the API server, ringside_autoscale_apiserver_up
// is 0 and its log has a line of it; when the API server is back (the
// same one, restarted on the same etcd and port), all three say so, and
// the controller syncs again.
func TestTheControllerSaysWhenTheAPIServerIsUnreachable(t *testing.T) {
	requireEnv(t)
	ctx := t.Context()
	const ns = "apiserver-down"
	if err := env.Namespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	// One replica, without leader election: an outage longer than the
	// renew deadline (10 s) would end a leader's process, as documented,
	// and the API server's restart under load may take that long.
	var out testbin.Buffer
	cmd := exec.Command(env.Ringside, "controller", "--kubeconfig", env.ControlPlane.Kubeconfig,
		"--namespace", ns, "--sync-period", "1s", "--metrics-addr", "127.0.0.1:0",
		"--etcd-endpoints", strings.Join(env.Etcd.Endpoints(), ","), "--leader-elect=false")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		if t.Failed() {
			t.Logf("controller:\n%s", out.String())
		}
	})
	var addr string
	if err := Poll(ctx, time.Minute, func() (bool, error) {
		m := servingAddr.FindStringSubmatch(out.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil, nil
	}); err != nil {
		t.Fatalf("the controller does not say where it serves: %v", err)
	}
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	// state waits until /readyz answers code with a body holding want,
	// and the gauge reads up.
	state := func(what string, code int, want, up string) {
		t.Helper()
		var gotCode int
		var body, metrics string
		err := Poll(ctx, time.Minute, func() (bool, error) {
			gotCode, body = get("/readyz")
			_, metrics = get("/metrics")
			return gotCode == code && strings.Contains(body, want) && strings.Contains(metrics, "\nringside_autoscale_apiserver_up "+up+"\n"), nil
		})
		if err != nil {
			t.Fatalf("%s: /readyz %d %q, want %d %q; apiserver_up in /metrics: %v, want %s: %v",
				what, gotCode, body, code, want, regexp.MustCompile(`\nringside_autoscale_apiserver_up \S+`).FindString(metrics), up, err)
		}
	}
	state("before", http.StatusOK, "ok", "1")

	if err := env.ControlPlane.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	restarted := false
	t.Cleanup(func() { // the tests after this one need it
		if !restarted {
			if err := env.ControlPlane.StartAPIServer(context.Background()); err != nil {
				t.Errorf("the API server did not start again: %v", err)
			}
		}
	})
	state("the API server stopped", http.StatusServiceUnavailable, "the API server is unreachable", "0")
	if code, body := get("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz %d %q while the API server is away: liveness must not fail on it (a restart does not help)", code, body)
	}
	if !strings.Contains(out.String(), "the API server is unreachable") {
		t.Errorf("no log line says the API server is unreachable:\n%s", out.String())
	}

	restarted = true
	if err := env.ControlPlane.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	state("the API server back", http.StatusOK, "ok", "1")
	if !strings.Contains(out.String(), "the API server answers again") {
		t.Errorf("no log line says the API server answers again:\n%s", out.String())
	}

	// It syncs again: a scaler created now (of a target without a scale
	// subresource) gets its condition from the controller's informer.
	if _, err := env.Client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	es := elasticScaler(ns, "settings", 1, 2, 0.7)
	es.Spec.ScaleTargetRef = autoscalingv2.CrossVersionObjectReference{APIVersion: "v1", Kind: "ConfigMap", Name: "settings"}
	if err := env.CreateScaler(ctx, es); err != nil {
		t.Fatal(err)
	}
	err := Poll(ctx, time.Minute, func() (bool, error) {
		got, err := env.Scaler(ctx, ns, "settings")
		if err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.AbleToScale)
		return c != nil && c.Reason == autoscale.ReasonFailedGetScale, nil
	})
	if err != nil {
		t.Fatalf("the controller did not sync a scaler created after the outage: %v", err)
	}
}
