package node

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// defaultPath is the PATH of a container whose image sets none.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// mountScript runs in the container's own mount and UTS namespaces, as
// root still: it sets the hostname to the pod's name, bind-mounts each
// volume on its mountPath (read-only when asked), enters the working
// directory and execs setpriv, which drops to the container's uid, gid
// and capabilities and execs the command.
//
// Arguments: hostname, workdir, then (source, target, ro|rw) triples, --,
// then the setpriv command line.
const mountScript = `set -e
echo "$1" > /proc/sys/kernel/hostname
wd=$2; shift 2
while [ "$1" != -- ]; do
  mount --bind "$1" "$2"
  if [ "$3" = ro ]; then mount -o remount,bind,ro "$2"; fi
  shift 3
done
shift
cd "$wd"
exec "$@"`

// resolve returns the local argv of a container: its image's entrypoint
// or the host's executable its command names, then args, $(VAR)-expanded
// with env.
func (w *podWorker) resolve(c *corev1.Container, env map[string]string) ([]string, error) {
	entry, ok := w.a.image(c.Image)
	if !ok {
		return nil, fmt.Errorf("image %q maps to no local executable", c.Image)
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	var argv []string
	switch {
	case len(c.Command) == 0 && entry == "":
		return nil, fmt.Errorf("image %q has no entrypoint here: the container must give a command", c.Image)
	case len(c.Command) == 0:
		argv = []string{entry}
	case inMount(c, expand(c.Command[0], lookup)):
		// A program on one of the container's volumes (put there by
		// another container, as an injected sidecar does): the process
		// finds it in its own mount namespace, not on the host.
		argv = append([]string{expand(c.Command[0], lookup)}, c.Command[1:]...)
	default:
		exe, err := w.a.executable(entry, expand(c.Command[0], lookup))
		if err != nil {
			return nil, err
		}
		argv = append([]string{exe}, c.Command[1:]...)
	}
	argv = append(argv, c.Args...)
	for i := 1; i < len(argv); i++ {
		argv[i] = expand(argv[i], lookup)
	}
	return argv, nil
}

// inMount reports whether path is absolute and under one of c's volume
// mounts.
func inMount(c *corev1.Container, path string) bool {
	if !filepath.IsAbs(path) {
		return false
	}
	for _, m := range c.VolumeMounts {
		dir := filepath.Clean(m.MountPath)
		if path == dir || strings.HasPrefix(path, dir+"/") {
			return true
		}
	}
	return false
}

// executable maps a command's first word: the entrypoint when it names the
// image's executable (by path or base name), else the host's executable.
func (a *Agent) executable(entry, name string) (string, error) {
	if entry != "" && (name == entry || filepath.Base(name) == filepath.Base(entry)) {
		return entry, nil
	}
	if filepath.IsAbs(name) {
		if _, err := os.Stat(name); err == nil {
			return name, nil
		}
	}
	p, err := lookPath(filepath.Base(name))
	if err != nil {
		return "", fmt.Errorf("command %q: not in the image mapping nor on the host: %w", name, err)
	}
	return p, nil
}

func lookPath(name string) (string, error) { return exec.LookPath(name) }

// environment returns the container's variables in the kubelet's order:
// the kubernetes Service's address, envFrom, then env with $(VAR)
// references to those before it.
func (w *podWorker) environment(ctx context.Context, c *corev1.Container) (map[string]string, []string, error) {
	env := map[string]string{
		"PATH":     defaultPath,
		"HOSTNAME": w.hostname(),
		"HOME":     "/root",
	}
	if uid, _ := w.ids(c); uid != 0 {
		env["HOME"] = "/"
	}
	if w.a.cfg.APIHost != "" {
		port := strconv.Itoa(w.a.cfg.APIPort)
		env["KUBERNETES_SERVICE_HOST"] = w.a.cfg.APIHost
		env["KUBERNETES_SERVICE_PORT"] = port
		env["KUBERNETES_SERVICE_PORT_HTTPS"] = port
	}
	for _, from := range c.EnvFrom {
		var data map[string][]byte
		var err error
		var optional bool
		switch {
		case from.ConfigMapRef != nil:
			optional = ptr.Deref(from.ConfigMapRef.Optional, false)
			data, err = w.a.objectData(ctx, w.spec.Namespace, "configmap", from.ConfigMapRef.Name)
		case from.SecretRef != nil:
			optional = ptr.Deref(from.SecretRef.Optional, false)
			data, err = w.a.objectData(ctx, w.spec.Namespace, "secret", from.SecretRef.Name)
		}
		if err != nil && !optional {
			return nil, nil, err
		}
		for k, v := range data {
			env[from.Prefix+k] = string(v)
		}
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	for _, e := range c.Env {
		v := expand(e.Value, lookup)
		if s := e.ValueFrom; s != nil {
			var err error
			if v, err = w.envSource(ctx, c, s); err != nil {
				if err == errOptionalMissing {
					continue
				}
				return nil, nil, fmt.Errorf("env %s: %w", e.Name, err)
			}
		}
		env[e.Name] = v
	}
	list := make([]string, 0, len(env))
	for k, v := range env {
		list = append(list, k+"="+v)
	}
	sort.Strings(list)
	return env, list, nil
}

var errOptionalMissing = fmt.Errorf("optional source missing")

func (w *podWorker) envSource(ctx context.Context, c *corev1.Container, s *corev1.EnvVarSource) (string, error) {
	switch {
	case s.FieldRef != nil:
		return w.fieldValue(s.FieldRef.FieldPath)
	case s.SecretKeyRef != nil, s.ConfigMapKeyRef != nil:
		kind, name, key, opt := "secret", "", "", false
		if r := s.SecretKeyRef; r != nil {
			name, key, opt = r.Name, r.Key, ptr.Deref(r.Optional, false)
		} else {
			r := s.ConfigMapKeyRef
			kind, name, key, opt = "configmap", r.Name, r.Key, ptr.Deref(r.Optional, false)
		}
		data, err := w.a.objectData(ctx, w.spec.Namespace, kind, name)
		if err == nil {
			if v, ok := data[key]; ok {
				return string(v), nil
			}
			err = fmt.Errorf("%s %s has no key %q", kind, name, key)
		}
		if opt {
			return "", errOptionalMissing
		}
		return "", err
	case s.ResourceFieldRef != nil:
		return resourceValue(c, s.ResourceFieldRef)
	}
	return "", fmt.Errorf("env source not supported here")
}

// resourceValue is a container's limit or request in the divisor's units,
// rounded up as the kubelet rounds it (0 when the container sets none:
// the kubelet would give the node's allocatable).
func resourceValue(c *corev1.Container, r *corev1.ResourceFieldSelector) (string, error) {
	kind, res, ok := strings.Cut(r.Resource, ".")
	if !ok {
		return "", fmt.Errorf("resourceFieldRef %q", r.Resource)
	}
	list := c.Resources.Limits
	if kind == "requests" {
		list = c.Resources.Requests
	}
	q, ok := list[corev1.ResourceName(res)]
	if !ok {
		return "0", nil
	}
	div := r.Divisor
	if div.IsZero() {
		return strconv.FormatInt(q.Value(), 10), nil
	}
	n := (q.MilliValue() + div.MilliValue() - 1) / div.MilliValue()
	return strconv.FormatInt(n, 10), nil
}

// fieldValue is the downward API's value of a pod field.
func (w *podWorker) fieldValue(path string) (string, error) {
	p := w.spec
	if k, ok := subscript(path, "metadata.labels"); ok {
		return p.Labels[k], nil
	}
	if k, ok := subscript(path, "metadata.annotations"); ok {
		return p.Annotations[k], nil
	}
	switch path {
	case "metadata.name":
		return p.Name, nil
	case "metadata.namespace":
		return p.Namespace, nil
	case "metadata.uid":
		return string(p.UID), nil
	case "metadata.labels":
		return formatMap(p.Labels), nil
	case "metadata.annotations":
		return formatMap(p.Annotations), nil
	case "spec.nodeName":
		return p.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return p.Spec.ServiceAccountName, nil
	case "status.podIP", "status.podIPs":
		return w.att.IP, nil
	case "status.hostIP", "status.hostIPs":
		return w.a.cfg.Network.HostIP(), nil
	}
	return "", fmt.Errorf("downward API field %q not supported here", path)
}

func subscript(path, prefix string) (string, bool) {
	rest, ok := strings.CutPrefix(path, prefix+"['")
	if !ok || !strings.HasSuffix(rest, "']") {
		return "", false
	}
	return strings.TrimSuffix(rest, "']"), true
}

// formatMap is the downward API's file format of labels and annotations.
func formatMap(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%q\n", k, m[k])
	}
	return b.String()
}

// ids are the uid and gid the container runs as: its securityContext's,
// else the pod's, else root.
func (w *podWorker) ids(c *corev1.Container) (uid, gid int64) {
	if ps := w.spec.Spec.SecurityContext; ps != nil {
		uid, gid = ptr.Deref(ps.RunAsUser, 0), ptr.Deref(ps.RunAsGroup, 0)
	}
	if sc := c.SecurityContext; sc != nil {
		if sc.RunAsUser != nil {
			uid = *sc.RunAsUser
		}
		if sc.RunAsGroup != nil {
			gid = *sc.RunAsGroup
		}
	}
	return uid, gid
}

// checkSecurity refuses what the kubelet refuses before a start.
func (w *podWorker) checkSecurity(c *corev1.Container) error {
	nonRoot := false
	if ps := w.spec.Spec.SecurityContext; ps != nil && ps.RunAsNonRoot != nil {
		nonRoot = *ps.RunAsNonRoot
	}
	if sc := c.SecurityContext; sc != nil && sc.RunAsNonRoot != nil {
		nonRoot = *sc.RunAsNonRoot
	}
	if uid, _ := w.ids(c); nonRoot && uid == 0 {
		return fmt.Errorf("container %q has runAsNonRoot and would run as root", c.Name)
	}
	return nil
}

// launcher returns the host command line that runs argv as container c of
// the pod: in the pod's network namespace, in a mount and UTS namespace of
// its own with the volumes mounted, as the container's user with only its
// capabilities.
func (w *podWorker) launcher(c *corev1.Container, argv []string) ([]string, error) {
	workdir := c.WorkingDir
	if workdir == "" {
		workdir = "/"
	}
	line := []string{"nsenter", "--net=" + w.att.NetNS, "--",
		"unshare", "--mount", "--uts", "--propagation", "private", "--",
		"/bin/sh", "-c", mountScript, "sh", w.hostname(), workdir}
	for _, m := range c.VolumeMounts {
		src, ok := w.vols[m.Name]
		if !ok {
			return nil, fmt.Errorf("container %q mounts unknown volume %q", c.Name, m.Name)
		}
		if m.SubPath != "" {
			src = filepath.Join(src, m.SubPath)
			if err := os.MkdirAll(src, 0o777); err != nil && !os.IsExist(err) {
				return nil, err
			}
		}
		if err := w.a.mounts.ensure(src, m.MountPath); err != nil {
			return nil, fmt.Errorf("mount point %s: %w", m.MountPath, err)
		}
		ro := "rw"
		if m.ReadOnly {
			ro = "ro"
		}
		line = append(line, src, m.MountPath, ro)
	}
	line = append(line, "--")
	return append(append(line, w.setpriv(c)...), argv...), nil
}

// setpriv drops to the container's identity. A root container holds its
// capability set as a container runtime gives it (bounding, permitted,
// effective); a non-root one keeps it only in the bounding set, as with
// containerd, where the exec of a plain binary by a non-root user clears
// the permitted set: in Kubernetes, a capability a non-root container
// adds is not effective.
func (w *podWorker) setpriv(c *corev1.Container) []string {
	uid, gid := w.ids(c)
	set, all := capabilities(c.SecurityContext)
	caps := setprivCaps(set, all)
	args := []string{"setpriv", "--reuid=" + strconv.FormatInt(uid, 10), "--regid=" + strconv.FormatInt(gid, 10)}
	var groups []string
	if ps := w.spec.Spec.SecurityContext; ps != nil {
		for _, g := range ps.SupplementalGroups {
			groups = append(groups, strconv.FormatInt(g, 10))
		}
		if ps.FSGroup != nil {
			groups = append(groups, strconv.FormatInt(*ps.FSGroup, 10))
		}
	}
	if len(groups) > 0 {
		args = append(args, "--groups="+strings.Join(groups, ","))
	} else {
		args = append(args, "--clear-groups")
	}
	inh := "-all"
	if uid == 0 {
		inh = caps
	}
	args = append(args, "--inh-caps="+inh, "--bounding-set="+caps)
	if sc := c.SecurityContext; sc != nil && sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
		args = append(args, "--no-new-privs")
	}
	return append(args, "--")
}

// hostname is the pod's spec.hostname, else its name, cut to the 63
// characters a hostname may have.
func (w *podWorker) hostname() string {
	h := w.spec.Spec.Hostname
	if h == "" {
		h = w.spec.Name
	}
	return h[:min(len(h), 63)]
}
