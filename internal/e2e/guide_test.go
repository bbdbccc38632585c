package e2e

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringside/ringside/autoscale/crd"
	"github.com/ringside/ringside/internal/charttest"
	"github.com/ringside/ringside/internal/kubetest"
)

// guideSection is the part of the guide this test follows.
const guideSection = "## Install on kind (or any cluster)"

// skippedByDesign are the guide's steps that need a real cloud or a
// container runtime, by the start of the command, with the reason. Every
// other step runs; a step the test does not know fails it.
var skippedByDesign = []struct{ prefix, why string }{
	{"kind ", "kind runs nodes in docker containers: the cluster here is the real control plane of internal/kubetest with its node agent"},
	{"make image", "no container runtime: the node agent runs this checkout's ringside binary for every ringside:<tag> image (the Dockerfile's one binary)"},
	{"docker build", "no container runtime: the node agent runs Debian's python3 with torch for ringside-pytorch:<tag>, and the checkout's examples/pytorch/train.py for the image's /app/train.py"},
	{"kubectl -n ringside-system rollout status statefulset/ringside-etcd", "the chart's etcd members need cluster DNS, Service routing (kube-proxy) and a volume provisioner, which the test cluster lacks: the install takes the etcd beside the cluster (etcd.mode=external), so no etcd StatefulSet is rendered"},
}

// The install section of docs/kubernetes.md, followed step by step on the
// real control plane: its code blocks are parsed from the guide in order
// (the guide and this test cannot drift apart), each kubectl command runs
// with a real kubectl, the helm commands with the chart tests' helm, and
// what each step's comment promises is checked. What cannot run here is
// in skippedByDesign with why, and the steps that need a kubelet's
// streaming API (exec, port-forward) do what kubectl would through the
// node agent and the pod network.
func TestTheInstallGuideRunsOnTheControlPlane(t *testing.T) {
	requireEnv(t)
	root := charttest.RepoRoot(t)
	raw, err := os.ReadFile(filepath.Join(root, charttest.GuideFile))
	if err != nil {
		t.Fatal(err)
	}
	// kubectl of the control plane's release, built with it: the guide's
	// kubectl commands run as written.
	kubectl, err := kubetest.Kubectl(t.Context(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	g := &guide{t: t, ctx: t.Context(), root: root, kubectl: kubectl, home: t.TempDir(), files: map[string]string{}}
	g.watch = &jobWatch{t: t, ns: "ml", job: "pytorch-live"}
	g.substitute("examples/k8s/pytorch-live.yaml",
		// The image's copy of the script is the checkout's.
		"/app/train.py", filepath.Join(root, "examples", "pytorch", "train.py"),
		// Two workers, as the example starts with: its scaler would grow
		// it to 8 PyTorch processes on this machine's 2 cores.
		"maxReplicas: 8", "maxReplicas: 2")
	// The guide's last step deletes the CRD, which the tests after this
	// one use.
	t.Cleanup(func() {
		ctx := context.Background()
		obj, err := crd.ElasticScalers()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := env.Dynamic.Resource(crdResource).Get(ctx, obj.GetName(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return // not deleted: the test ended before that step
		}
		if err := installCRD(ctx, obj); err != nil {
			t.Errorf("installing the CRD again: %v", err)
		}
	})
	steps := guideCommands(t, string(raw))
	for _, c := range steps {
		g.step(c)
	}
	for _, s := range skippedByDesign {
		if !slices.ContainsFunc(steps, func(c charttest.Command) bool { return strings.HasPrefix(c.Text, s.prefix) }) {
			t.Errorf("the guide has no step %q any more: remove it from skippedByDesign", s.prefix)
		}
	}
	t.Logf("%d steps of the guide ran, %d skipped by design", g.ran, g.skipped)
}

// guideCommands returns the shell commands of guideSection, in order.
func guideCommands(t *testing.T, doc string) []charttest.Command {
	start := strings.Index(doc, "\n"+guideSection+"\n")
	if start < 0 {
		t.Fatalf("%s has no section %q", charttest.GuideFile, guideSection)
	}
	first := strings.Count(doc[:start+1], "\n") + 1
	last := first + strings.Count(doc[start+1:], "\n")
	if end := strings.Index(doc[start+1:], "\n## "); end >= 0 {
		last = first + strings.Count(doc[start+1:start+1+end], "\n")
	}
	var out []charttest.Command
	for _, c := range charttest.ShellCommands(doc) {
		if c.Line > first && c.Line <= last {
			out = append(out, c)
		}
	}
	if len(out) < 15 {
		t.Fatalf("found %d commands in %q: the parser no longer finds them", len(out), guideSection)
	}
	return out
}

// guide carries out the guide's steps.
type guide struct {
	t       *testing.T
	ctx     context.Context
	root    string
	kubectl string
	home    string            // kubectl's $HOME: its discovery cache
	files   map[string]string // a file of the guide -> the copy applied here
	watch   *jobWatch
	// forwarded is the address a port-forward step leads to.
	forwarded    string
	ran, skipped int
}

// substitute writes a copy of the checkout's file with each old string
// replaced by the new one after it; the guide's commands apply the copy.
func (g *guide) substitute(file string, oldNew ...string) {
	data, err := os.ReadFile(filepath.Join(g.root, file))
	if err != nil {
		g.t.Fatal(err)
	}
	s := string(data)
	for i := 0; i < len(oldNew); i += 2 {
		if !strings.Contains(s, oldNew[i]) {
			g.t.Fatalf("%s no longer holds %q, which the test replaces: update it", file, oldNew[i])
		}
		s = strings.ReplaceAll(s, oldNew[i], oldNew[i+1])
	}
	copyPath := filepath.Join(g.t.TempDir(), filepath.Base(file))
	if err := os.WriteFile(copyPath, []byte(s), 0o644); err != nil {
		g.t.Fatal(err)
	}
	g.files[file] = copyPath
}

func (g *guide) step(c charttest.Command) {
	t := g.t
	t.Helper()
	for _, s := range skippedByDesign {
		if strings.HasPrefix(c.Text, s.prefix) {
			t.Logf("%s:%d skipped by design: %s\n\t(%s)", charttest.GuideFile, c.Line, c.Text, s.why)
			g.skipped++
			return
		}
	}
	words, err := charttest.ShellWords(c.Text)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s:%d $ %s", charttest.GuideFile, c.Line, c.Text)
	g.ran++
	switch words[0] {
	case "helm":
		g.helm(words[1:])
	case "kubectl":
		g.kubectlStep(c, words[1:])
	case "curl":
		g.curl(c, words[1:])
	default:
		t.Fatalf("%s:%d: the guide's test does not know %q: teach it to carry the step out, or add it to skippedByDesign with why", charttest.GuideFile, c.Line, words[0])
	}
}

// helm runs a helm step with the chart of this checkout; an install gets
// the etcd beside the cluster (see skippedByDesign) on top of the
// guide's values.
func (g *guide) helm(args []string) {
	args = slices.Clone(args)
	for i, a := range args {
		if a == "charts/ringside" {
			args[i] = filepath.Join(g.root, a)
		}
	}
	if args[0] == "install" {
		args = append(args, "--set", "etcd.mode=external",
			"--set", "etcd.external.endpoints={"+strings.Join(env.Etcd.Endpoints(), ",")+"}")
	}
	out, err := env.Helm(g.ctx, charttest.Helm(g.t), args...)
	if err != nil {
		g.t.Fatalf("%v\n%s", err, describePods(ChartNamespace))
	}
	g.t.Log(out)
	if args[0] == "install" {
		// "The Grafana dashboard is a ConfigMap labelled
		// grafana_dashboard: "1"", for Grafana's sidecar to find.
		ns, _, _ := splitArgs(args)
		l, err := env.Client.CoreV1().ConfigMaps(ns).List(g.ctx, metav1.ListOptions{LabelSelector: "grafana_dashboard=1"})
		if err != nil || len(l.Items) == 0 {
			g.t.Errorf("no ConfigMap labelled grafana_dashboard=1 after the install (%v)", err)
		}
	}
}

// kubectlStep runs a kubectl step, then checks what its comment says.
func (g *guide) kubectlStep(c charttest.Command, args []string) {
	ns, verb, rest := splitArgs(args)
	switch verb {
	case "exec":
		g.exec(ns, rest)
		return
	case "port-forward":
		g.portForward(ns, rest)
		return
	}
	step := g.await(c.Text, verb, rest)
	out := g.run(args...)
	g.t.Log(out)
	g.check(c.Text, verb, rest, out, step)
}

// await waits, before a step, for what its reader would wait for, and
// returns the job's step before a pod deletion.
func (g *guide) await(text, verb string, rest []string) (step int64) {
	if verb == "get" && strings.Contains(text, "pods,elasticscalers") {
		// "two pods, each with the ringside sidecar": a reader waits for
		// them to run before looking.
		waitSize(g.ctx, g.t, g.watch, 2, 5*time.Minute)
	}
	if verb == "delete" && slices.Contains(rest, "pod") {
		step = g.watch.lastStep
	}
	if verb == "get" && slices.Contains(rest, "es") {
		// A reader looks once the controller has synced: the world
		// size and generation show when it has read the job.
		err := Poll(g.ctx, 2*time.Minute, func() (bool, error) {
			es, err := env.Scaler(g.ctx, "ml", "pytorch-live")
			return err == nil && es.Status.WorldSize == 2 && es.Status.JobGeneration > 0, nil
		})
		if err != nil {
			g.t.Fatalf("the ElasticScaler's status never showed world size 2: %v", err)
		}
	}
	return step
}

// check checks what a step's comment in the guide promises of its output
// out.
func (g *guide) check(text, verb string, rest []string, out string, step int64) {
	switch {
	case verb == "get" && strings.Contains(text, "pods,elasticscalers"):
		for _, want := range []string{"pod/pytorch-live-0", "pod/pytorch-live-1", "elasticscaler.ringside.dev/pytorch-live"} {
			if !strings.Contains(out, want) {
				g.t.Errorf("kubectl get pods,elasticscalers lists no %s:\n%s", want, out)
			}
		}
		g.injected("pytorch-live-0", "pytorch-live-1")
	case verb == "get" && slices.Contains(rest, "es"):
		// "world size, generation, goodput, phase"
		header, _, _ := strings.Cut(out, "\n")
		for _, col := range []string{"WORLD", "GENERATION", "GOODPUT", "PHASE"} {
			if !strings.Contains(header, col) {
				g.t.Errorf("kubectl get es has no column %s:\n%s", col, out)
			}
		}
		if column(out, "NAME") != "pytorch-live" || column(out, "WORLD") != "2" || column(out, "GENERATION") == "" || column(out, "PHASE") == "" {
			g.t.Errorf("kubectl get es shows no pytorch-live at world size 2 with its generation and phase:\n%s", out)
		}
	case verb == "describe":
		// "conditions and scaling Events"
		for _, want := range []string{"Conditions:", "AbleToScale", "Events:"} {
			if !strings.Contains(out, want) {
				g.t.Errorf("kubectl describe es shows no %s:\n%s", want, out)
			}
		}
	case verb == "delete" && slices.Contains(rest, "pod"):
		// "drains: the other trains on, 0 steps lost" (jobWatch fails a
		// step that goes back), and the StatefulSet brings it back.
		waitRecovered(g.ctx, g.t, g.watch, 2, step)
		checkChecksums(g.t, "ml", "pytorch-live", 2)
	case verb == "delete" && slices.Contains(rest, "crd"):
		g.uninstalled()
	}
}

// column returns the value in the first row of kubectl's table out under
// the column name ("" when empty or absent): the columns start where
// their headers do, and an empty cell leaves only spaces.
func column(out, name string) string {
	lines := strings.SplitN(out, "\n", 3)
	if len(lines) < 2 {
		return ""
	}
	header, row := lines[0], lines[1]
	start := strings.Index(header, name)
	if start < 0 || start >= len(row) {
		return ""
	}
	end := len(header)
	if next := strings.IndexFunc(header[start+len(name):], func(r rune) bool { return r != ' ' }); next >= 0 {
		end = start + len(name) + next
	}
	return strings.TrimSpace(row[start:min(end, len(row))])
}

// splitArgs splits kubectl's (or helm's) arguments into the namespace
// (-n), the command and the rest.
func splitArgs(args []string) (ns, verb string, rest []string) {
	for i := 0; i < len(args); i++ {
		switch {
		case args[i] == "-n" && i+1 < len(args):
			ns = args[i+1]
			i++
		case verb == "" && !strings.HasPrefix(args[i], "-"):
			verb = args[i]
		default:
			rest = append(rest, args[i])
		}
	}
	return ns, verb, rest
}

// run runs kubectl with args (a file of the guide replaced by its copy)
// and returns its output; a failure ends the test.
func (g *guide) run(args ...string) string {
	args = slices.Clone(args)
	for i, a := range args {
		if cp, ok := g.files[a]; ok {
			args[i] = cp
		}
	}
	out, err := g.runKubectl(args...)
	if err != nil {
		g.t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func (g *guide) runKubectl(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(g.ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, g.kubectl, args...)
	cmd.Dir = g.root
	cmd.Env = append(os.Environ(), "KUBECONFIG="+env.ControlPlane.Kubeconfig, "HOME="+g.home)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// exec carries out `kubectl exec POD -c CONTAINER -- COMMAND`: the node
// agent runs the command in the container, where a kubelet would.
func (g *guide) exec(ns string, rest []string) {
	i := slices.Index(rest, "--")
	c := slices.Index(rest, "-c")
	if i < 1 || c < 0 || c+1 >= i {
		g.t.Fatalf("kubectl exec %v: want POD -c CONTAINER -- COMMAND", rest)
	}
	out, err := env.Agent.Exec(g.ctx, ns, rest[0], rest[c+1], rest[i+1:]...)
	g.t.Log(out)
	if err != nil {
		g.t.Fatalf("exec in %s/%s: %v", ns, rest[0], err)
	}
	if slices.Equal(rest[i+1:min(i+3, len(rest))], []string{"ringside", "status"}) {
		if !strings.Contains(out, "job "+ns+"/pytorch-live") || !strings.Contains(out, "world size 2") {
			g.t.Errorf("ringside status shows no job %s/pytorch-live at world size 2:\n%s", ns, out)
		}
	}
}

// portForward carries out `kubectl port-forward pod/$(...) LOCAL:REMOTE`:
// the command substitution runs in sh with this kubectl first on PATH, as
// the reader's shell would run it, and the forward leads to the pod's
// address on the pod network (a kubelet's streaming API would tunnel
// there).
func (g *guide) portForward(ns string, rest []string) {
	var pod, remote string
	for _, a := range rest {
		if name, ok := strings.CutPrefix(a, "pod/"); ok {
			_, inner, ok := charttest.Substitution(name)
			if !ok {
				g.t.Fatalf("port-forward to %s: want pod/$(...)", a)
			}
			pod = g.shell(inner)
		} else if _, r, ok := strings.Cut(a, ":"); ok {
			remote = r
		}
	}
	if pod == "" || remote == "" {
		g.t.Fatalf("port-forward %v: want pod/$(...) and LOCAL:REMOTE", rest)
	}
	p, err := env.Client.CoreV1().Pods(ns).Get(g.ctx, pod, metav1.GetOptions{})
	if err != nil {
		g.t.Fatalf("port-forward to the pod the command named (%q): %v", pod, err)
	}
	g.forwarded = p.Status.PodIP + ":" + remote
}

// shell runs command with sh, the built kubectl first on PATH, and
// returns its output without the trailing newline.
func (g *guide) shell(command string) string {
	cmd := exec.CommandContext(g.ctx, "sh", "-c", command)
	cmd.Dir = g.root
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(g.kubectl)+":"+os.Getenv("PATH"),
		"KUBECONFIG="+env.ControlPlane.Kubeconfig, "HOME="+g.home)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		g.t.Fatalf("sh -c %q: %v\n%s", command, err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// curl carries out `curl -s localhost:PORT/PATH | grep PATTERN` through
// the port-forward before it, until grep would find the pattern: the
// controller measures the job a sync or two after it trains.
func (g *guide) curl(c charttest.Command, args []string) {
	if g.forwarded == "" {
		g.t.Fatalf("%s:%d: curl without a port-forward before it", charttest.GuideFile, c.Line)
	}
	var path string
	for _, a := range args {
		if _, p, ok := strings.Cut(a, "localhost:"); ok {
			_, path, _ = strings.Cut(p, "/")
		}
	}
	_, grep, ok := strings.Cut(c.Text, "| grep ")
	if !ok || path == "" {
		g.t.Fatalf("%s:%d: want curl localhost:PORT/PATH | grep PATTERN", charttest.GuideFile, c.Line)
	}
	words, err := charttest.ShellWords(grep)
	if err != nil || len(words) != 1 {
		g.t.Fatalf("%s:%d: want | grep PATTERN, one word: %v", charttest.GuideFile, c.Line, err)
	}
	pattern := regexp.MustCompile(words[0])
	var found []string
	err = Poll(g.ctx, 3*time.Minute, func() (bool, error) {
		found = nil
		resp, err := http.Get("http://" + g.forwarded + "/" + path)
		if err != nil {
			return false, nil
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return false, nil
		}
		sc := bufio.NewScanner(bytes.NewReader(body))
		for sc.Scan() {
			if pattern.MatchString(sc.Text()) {
				found = append(found, sc.Text())
			}
		}
		// The controller watches every namespace: the series of scalers
		// other tests left may come before the example's.
		return slices.ContainsFunc(found, func(l string) bool { return strings.Contains(l, `name="pytorch-live"`) }), nil
	})
	if err != nil {
		g.t.Fatalf("%s:%d: no line of http://%s/%s matches %q for pytorch-live: %v (matching: %q)", charttest.GuideFile, c.Line,
			g.forwarded, path, pattern, err, found)
	}
	g.t.Log(strings.Join(found, "\n"))
}

// injected checks the pods have the sidecar.
func (g *guide) injected(pods ...string) {
	for _, name := range pods {
		p, err := env.Client.CoreV1().Pods("ml").Get(g.ctx, name, metav1.GetOptions{})
		if err != nil {
			g.t.Fatal(err)
		}
		if !injected(p) {
			g.t.Errorf("pod %s has no ringside sidecar", name)
		}
	}
}

// uninstalled checks what the guide says of a cluster after the
// uninstall: pods created after it are not injected.
func (g *guide) uninstalled() {
	p, err := env.Client.CoreV1().Pods("ml").Create(g.ctx, probePod("after-uninstall", "pytorch-live"), metav1.CreateOptions{})
	if err != nil {
		g.t.Fatalf("a pod created after the uninstall: %v", err)
	}
	if injected(p) {
		g.t.Error("a pod created after the uninstall was injected")
	}
	if err := env.Client.CoreV1().Pods("ml").Delete(g.ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		g.t.Error(err)
	}
}
