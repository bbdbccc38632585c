package charttest

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// docFile is the user guide whose commands are checked.
const docFile = GuideFile

// Every shell command of docs/kubernetes.md is one the repository really
// supports: each make target exists, each helm install, upgrade and
// template renders with the values it gives (on top of the last install's
// for --reuse-values), each object kubectl names (a rollout, a
// port-forward's Service and port, the CRD, the etcd volumes' label) is
// one the chart renders, each file and build context exists, each
// ringside subcommand exists, and every image the chart and the applied
// examples run is one the guide builds and loads into kind. A command the
// test does not know fails it: teach the test a new tool, do not skip it.
func TestEveryCommandInTheKubernetesGuideIsSupported(t *testing.T) {
	root := RepoRoot(t)
	raw, err := os.ReadFile(filepath.Join(root, docFile))
	if err != nil {
		t.Fatal(err)
	}
	d := &docCheck{t: t, root: root, built: map[string]bool{}, loaded: map[string]bool{}, used: map[string]string{}}
	d.targets = makeTargets(t, filepath.Join(root, "Makefile"))
	d.subcommands = subcommands(t, filepath.Join(root, "cmd", "ringside"))
	cmds := ShellCommands(string(raw))
	if len(cmds) < 20 {
		t.Fatalf("found %d commands in %s; the parser no longer finds them", len(cmds), docFile)
	}
	for _, c := range cmds {
		words, err := ShellWords(c.Text)
		if err != nil {
			t.Errorf("%s:%d: %v", docFile, c.Line, err)
			continue
		}
		if len(words) == 0 {
			continue
		}
		if err := d.check(words); err != nil {
			t.Errorf("%s:%d: %s\n\t%v", docFile, c.Line, c.Text, err)
		}
	}
	for img, by := range d.used {
		if !d.built[img] || !d.loaded[img] {
			t.Errorf("%s runs image %s, which the guide does not both build (built: %v) and load into kind (loaded: %v)", by, img, d.built[img], d.loaded[img])
		}
	}
}

// docCheck holds what the guide's commands have done so far.
type docCheck struct {
	t                    *testing.T
	root                 string
	targets, subcommands map[string]bool
	// installed are the --set and -f flags of the last helm install, which
	// an upgrade with --reuse-values builds on; rendered is what it gave.
	installed []string
	rendered  []Object
	// Images built (make image, docker build), loaded into kind, and run
	// by the chart or an applied example (image -> what runs it).
	built, loaded map[string]bool
	used          map[string]string
}

func (d *docCheck) check(w []string) error {
	switch w[0] {
	case "make":
		for _, a := range w[1:] {
			if !strings.Contains(a, "=") && !d.targets[a] {
				return fmt.Errorf("the Makefile has no target %q", a)
			}
			if a == "image" {
				d.built["ringside:0.1.0"] = true // the Makefile's VERSION, the chart's appVersion
			}
		}
		return nil
	case "helm":
		return d.helm(w[1:])
	case "kubectl":
		return d.kubectl(w[1:])
	case "docker":
		return d.docker(w[1:])
	case "kind":
		if len(w) > 2 && w[1] == "load" && w[2] == "docker-image" {
			for _, a := range w[3:] {
				if !strings.HasPrefix(a, "-") {
					d.loaded[a] = true
				}
			}
		}
		return nil
	case "ringside":
		if len(w) < 2 || !d.subcommands[w[1]] {
			return fmt.Errorf("ringside has no subcommand %q", strings.Join(w[1:min(2, len(w))], ""))
		}
		return nil
	case "go":
		for _, a := range w {
			if strings.HasPrefix(a, "./") && !d.exists(strings.TrimSuffix(a, "...")) {
				return fmt.Errorf("no package %s", a)
			}
		}
		return nil
	case "curl":
		return nil
	}
	return fmt.Errorf("the guide's test does not know %q: teach docs_test.go what to check of it", w[0])
}

func (d *docCheck) exists(path string) bool {
	_, err := os.Stat(filepath.Join(d.root, path))
	return err == nil
}

// flagValue returns the values of flag (and its short form) in w.
func flagValues(w []string, names ...string) []string {
	var out []string
	for i, a := range w {
		for _, n := range names {
			if a == n && i+1 < len(w) {
				out = append(out, w[i+1])
			} else if v, ok := strings.CutPrefix(a, n+"="); ok {
				out = append(out, v)
			}
		}
	}
	return out
}

func (d *docCheck) helm(w []string) error {
	if len(w) == 0 {
		return fmt.Errorf("helm without a command")
	}
	switch w[0] {
	case "uninstall":
		return nil
	case "install", "upgrade", "template":
	default:
		return fmt.Errorf("the guide's test does not know helm %s", w[0])
	}
	if len(w) < 3 || w[2] != "charts/ringside" {
		return fmt.Errorf("helm %s of a chart other than charts/ringside", w[0])
	}
	var values []string
	for _, v := range flagValues(w, "--set") {
		values = append(values, "--set", v)
	}
	for _, f := range flagValues(w, "-f", "--values") {
		values = append(values, "-f", filepath.Join(d.root, f))
	}
	for _, v := range flagValues(w, "--kube-version") {
		values = append(values, "--kube-version", v)
	}
	if slices.Contains(w, "--reuse-values") {
		values = append(slices.Clone(d.installed), values...)
	}
	objs, err := Template(d.t, values...)
	if err != nil {
		return err
	}
	if w[0] == "install" {
		d.installed = values
	}
	if w[0] != "template" {
		d.rendered = objs
		for name, spec := range PodSpecs(objs) {
			d.use(spec.Spec, "the chart's "+name)
		}
	}
	return nil
}

func (d *docCheck) use(spec corev1.PodSpec, by string) {
	for _, c := range append(spec.InitContainers, spec.Containers...) {
		d.used[c.Image] = by
	}
}

func (d *docCheck) find(kind, name string) (Object, bool) {
	i := slices.IndexFunc(Find(d.rendered, kind), func(o Object) bool { return o.Name == name })
	if i < 0 {
		return Object{}, false
	}
	return Find(d.rendered, kind)[i], true
}

// kinds are kubectl's short names of the kinds the guide names.
var kinds = map[string]string{"deploy": "Deployment", "deployment": "Deployment", "statefulset": "StatefulSet", "sts": "StatefulSet", "svc": "Service", "service": "Service"}

func (d *docCheck) kubectl(w []string) error {
	var args []string // w without -n NS and flags
	for i := 0; i < len(w); i++ {
		if w[i] == "--" {
			args = append(args, w[i:]...)
			break
		}
		if w[i] == "-n" || w[i] == "-c" || w[i] == "-l" || w[i] == "-f" || w[i] == "--namespace" {
			i++
			continue
		}
		if !strings.HasPrefix(w[i], "-") {
			args = append(args, w[i])
		}
	}
	if len(args) == 0 {
		return fmt.Errorf("kubectl without a command")
	}
	for _, f := range flagValues(w, "-f") {
		if !d.exists(f) {
			return fmt.Errorf("no file %s", f)
		}
		if args[0] == "apply" {
			d.applied(f)
		}
	}
	switch args[0] {
	case "rollout", "port-forward":
		for _, a := range args[1:] {
			kind, name, ok := strings.Cut(a, "/")
			if !ok {
				continue
			}
			if kind == "pod" && args[0] == "port-forward" {
				return d.podForward(name, args)
			}
			o, found := d.find(kinds[kind], name)
			if !found {
				return fmt.Errorf("the chart renders no %s %s", kinds[kind], name)
			}
			if args[0] == "port-forward" {
				return checkPorts(o, args)
			}
		}
	case "delete":
		if len(args) > 2 && args[1] == "crd" {
			crd, err := os.ReadFile(filepath.Join(d.root, "charts/ringside/crds/ringside.dev_elasticscalers.yaml"))
			if err != nil || !strings.Contains(string(crd), "name: "+args[2]+"\n") {
				return fmt.Errorf("the chart installs no CRD %s", args[2])
			}
		}
		if len(args) > 1 && args[1] == "pvc" {
			return d.etcdVolumesLabelled(flagValues(w, "-l"))
		}
	case "exec":
		i := slices.Index(args, "--")
		if i < 0 || i+1 >= len(args) {
			return fmt.Errorf("kubectl exec without -- COMMAND")
		}
		return d.check(args[i+1:])
	case "get":
		if len(args) > 2 && args[1] == "lease" {
			return d.leaderLease(args[2])
		}
	case "apply", "describe", "scale", "label", "create", "logs", "patch", "taint":
	default:
		return fmt.Errorf("the guide's test does not know kubectl %s", args[0])
	}
	return nil
}

// podForward checks a port-forward to a pod named by a command
// substitution: the command is one the guide's test knows, and the remote
// port one that a pod of the chart serves.
func (d *docCheck) podForward(name string, args []string) error {
	prefix, inner, ok := Substitution(name)
	if !ok || prefix != "" {
		return fmt.Errorf("port-forward to pod %s: name the pod by a command, $(...), as pod names are not the chart's", name)
	}
	words, err := ShellWords(inner)
	if err != nil {
		return err
	}
	if err := d.check(words); err != nil {
		return fmt.Errorf("in $(%s): %w", inner, err)
	}
	for _, a := range args {
		_, remote, ok := strings.Cut(a, ":")
		if !ok {
			continue
		}
		served := false
		for _, tmpl := range PodSpecs(d.rendered) {
			for _, c := range tmpl.Spec.Containers {
				served = served || slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return fmt.Sprint(p.ContainerPort) == remote })
			}
		}
		if !served {
			return fmt.Errorf("no pod of the chart serves port %s", remote)
		}
	}
	return nil
}

// leaderLease checks name is the controller's leader Lease.
func (d *docCheck) leaderLease(name string) error {
	o, ok := d.find("Deployment", "ringside-controller")
	if !ok {
		return fmt.Errorf("the chart renders no controller Deployment")
	}
	args := o.Typed.(*appsv1.Deployment).Spec.Template.Spec.Containers[0].Args
	if !slices.Contains(args, "--leader-elect-lease-name="+name) {
		return fmt.Errorf("the controller's leader Lease is not %s: its args are %v", name, args)
	}
	return nil
}

// checkPorts checks a port-forward's remote ports are the Service's.
func checkPorts(o Object, args []string) error {
	svc := o.Typed.(*corev1.Service)
	for _, a := range args {
		_, remote, ok := strings.Cut(a, ":")
		if !ok {
			continue
		}
		if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return fmt.Sprint(p.Port) == remote }) {
			return fmt.Errorf("Service %s has no port %s", svc.Name, remote)
		}
	}
	return nil
}

// etcdVolumesLabelled checks the etcd members' volume claims carry the
// labels a `kubectl delete pvc -l` selects them by.
func (d *docCheck) etcdVolumesLabelled(selectors []string) error {
	o, ok := d.find("StatefulSet", "ringside-etcd")
	if !ok {
		return fmt.Errorf("the chart renders no etcd StatefulSet")
	}
	for _, vct := range o.Typed.(*appsv1.StatefulSet).Spec.VolumeClaimTemplates {
		for _, sel := range selectors {
			k, v, _ := strings.Cut(sel, "=")
			if vct.Labels[k] != v {
				return fmt.Errorf("etcd's volume claims are labelled %v, not %s", vct.Labels, sel)
			}
		}
	}
	return nil
}

// applied records the images of the pods of manifest f.
func (d *docCheck) applied(f string) {
	raw, err := os.ReadFile(filepath.Join(d.root, f))
	if err != nil {
		d.t.Error(err)
		return
	}
	for _, doc := range strings.Split(string(raw), "\n---") {
		var sts appsv1.StatefulSet
		if err := yaml.Unmarshal([]byte(doc), &sts); err == nil && sts.Kind == "StatefulSet" {
			d.use(sts.Spec.Template.Spec, f)
		}
	}
}

func (d *docCheck) docker(w []string) error {
	if len(w) == 0 || w[0] != "build" {
		return fmt.Errorf("the guide's test does not know docker %s", strings.Join(w, " "))
	}
	for _, f := range flagValues(w, "-f", "--file") {
		if !d.exists(f) {
			return fmt.Errorf("no Dockerfile %s", f)
		}
	}
	if ctx := w[len(w)-1]; !d.exists(ctx) {
		return fmt.Errorf("no build context %s", ctx)
	}
	for _, tag := range flagValues(w, "-t", "--tag") {
		d.built[tag] = true
	}
	return nil
}

var targetPattern = regexp.MustCompile(`(?m)^([a-zA-Z0-9_-]+):`)

func makeTargets(t *testing.T, path string) map[string]bool {
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, m := range targetPattern.FindAllStringSubmatch(string(raw), -1) {
		out[m[1]] = true
	}
	return out
}

var usePattern = regexp.MustCompile(`Use:\s+"([a-z][a-z-]*)`)

// subcommands are the names of ringside's cobra commands.
func subcommands(t *testing.T, dir string) map[string]bool {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range usePattern.FindAllStringSubmatch(string(raw), -1) {
			out[m[1]] = true
		}
	}
	return out
}
