package node

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// volumes makes each volume of the pod a directory under dir: emptyDir
// empty (mode 0777, as the kubelet makes it), secret, configMap,
// downwardAPI and projected ones with their files written once (they are
// not refreshed later), hostPath the host's path itself. It returns the
// directory of each volume by name.
func (w *podWorker) volumes(ctx context.Context, dir string) (map[string]string, error) {
	dirs := map[string]string{}
	for _, v := range w.spec.Spec.Volumes {
		d := filepath.Join(dir, v.Name)
		var err error
		switch s := v.VolumeSource; {
		case s.EmptyDir != nil:
			err = mkdirMode(d, 0o777)
		case s.HostPath != nil:
			d = s.HostPath.Path
			if t := s.HostPath.Type; t != nil && *t == corev1.HostPathDirectoryOrCreate {
				err = os.MkdirAll(d, 0o755)
			}
		case s.Secret != nil:
			err = w.writeProjection(ctx, d, s.Secret.DefaultMode, []corev1.VolumeProjection{{Secret: &corev1.SecretProjection{
				LocalObjectReference: corev1.LocalObjectReference{Name: s.Secret.SecretName}, Items: s.Secret.Items, Optional: s.Secret.Optional}}})
		case s.ConfigMap != nil:
			err = w.writeProjection(ctx, d, s.ConfigMap.DefaultMode, []corev1.VolumeProjection{{ConfigMap: &corev1.ConfigMapProjection{
				LocalObjectReference: s.ConfigMap.LocalObjectReference, Items: s.ConfigMap.Items, Optional: s.ConfigMap.Optional}}})
		case s.DownwardAPI != nil:
			err = w.writeProjection(ctx, d, s.DownwardAPI.DefaultMode, []corev1.VolumeProjection{{DownwardAPI: &corev1.DownwardAPIProjection{Items: s.DownwardAPI.Items}}})
		case s.Projected != nil:
			err = w.writeProjection(ctx, d, s.Projected.DefaultMode, s.Projected.Sources)
		default:
			err = fmt.Errorf("volume %q: only emptyDir, hostPath, secret, configMap, downwardAPI and projected volumes run here", v.Name)
		}
		if err != nil {
			return nil, err
		}
		dirs[v.Name] = d
	}
	return dirs, nil
}

func mkdirMode(d string, mode os.FileMode) error {
	if err := os.MkdirAll(d, mode); err != nil {
		return err
	}
	return os.Chmod(d, mode) // MkdirAll's mode is masked by the umask
}

// writeProjection writes the files of sources into d.
func (w *podWorker) writeProjection(ctx context.Context, d string, defaultMode *int32, sources []corev1.VolumeProjection) error {
	if err := mkdirMode(d, 0o755); err != nil {
		return err
	}
	mode := os.FileMode(0o644)
	if defaultMode != nil {
		mode = os.FileMode(*defaultMode)
	}
	write := func(path string, data []byte, m *int32) error {
		fm := mode
		if m != nil {
			fm = os.FileMode(*m)
		}
		p := filepath.Join(d, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, data, fm); err != nil {
			return err
		}
		return os.Chmod(p, fm)
	}
	for _, src := range sources {
		var err error
		switch {
		case src.Secret != nil:
			err = w.writeKeys(ctx, write, "secret", src.Secret.Name, src.Secret.Items, ptr.Deref(src.Secret.Optional, false))
		case src.ConfigMap != nil:
			err = w.writeKeys(ctx, write, "configmap", src.ConfigMap.Name, src.ConfigMap.Items, ptr.Deref(src.ConfigMap.Optional, false))
		case src.DownwardAPI != nil:
			for _, it := range src.DownwardAPI.Items {
				if it.FieldRef == nil {
					return fmt.Errorf("downwardAPI item %q: only fieldRef runs here", it.Path)
				}
				v, ferr := w.fieldValue(it.FieldRef.FieldPath)
				if ferr != nil {
					return ferr
				}
				if err = write(it.Path, []byte(v), it.Mode); err != nil {
					break
				}
			}
		case src.ServiceAccountToken != nil:
			err = w.writeToken(ctx, write, src.ServiceAccountToken)
		default:
			err = fmt.Errorf("projected volume source not supported here (clusterTrustBundle, podCertificate)")
		}
		if err != nil {
			return err
		}
	}
	return nil
}

type writeFunc func(path string, data []byte, mode *int32) error

func (w *podWorker) writeKeys(ctx context.Context, write writeFunc, kind, name string, items []corev1.KeyToPath, optional bool) error {
	data, err := w.a.objectData(ctx, w.spec.Namespace, kind, name)
	if err != nil {
		if optional {
			return nil
		}
		return err
	}
	if len(items) == 0 {
		keys := make([]string, 0, len(data))
		for k := range data {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			items = append(items, corev1.KeyToPath{Key: k, Path: k})
		}
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			if optional {
				continue
			}
			return fmt.Errorf("%s %s has no key %q", kind, name, it.Key)
		}
		if err := write(it.Path, v, it.Mode); err != nil {
			return err
		}
	}
	return nil
}

// writeToken asks the API server for a token bound to the pod, as the
// kubelet does for the kube-api-access volume every pod gets.
func (w *podWorker) writeToken(ctx context.Context, write writeFunc, p *corev1.ServiceAccountTokenProjection) error {
	sa := w.spec.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: p.ExpirationSeconds,
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: w.spec.Name, UID: w.spec.UID},
	}}
	if p.Audience != "" {
		req.Spec.Audiences = []string{p.Audience}
	}
	tok, err := w.a.client.CoreV1().ServiceAccounts(w.spec.Namespace).CreateToken(ctx, sa, req, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("service account token for %s: %w", sa, err)
	}
	return write(p.Path, []byte(tok.Status.Token), nil)
}

// objectData reads a Secret's or ConfigMap's keys.
func (a *Agent) objectData(ctx context.Context, ns, kind, name string) (map[string][]byte, error) {
	out := map[string][]byte{}
	if kind == "secret" {
		s, err := a.client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("secret %s: %w", name, err)
		}
		for k, v := range s.Data {
			out[k] = v
		}
		return out, nil
	}
	c, err := a.client.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("configmap %s: %w", name, err)
	}
	for k, v := range c.Data {
		out[k] = []byte(v)
	}
	for k, v := range c.BinaryData {
		out[k] = v
	}
	return out, nil
}

// mountPoints are the directories and files the agent created on the host
// for bind mounts to land on (a mount needs an existing target); Stop
// removes them again if they are still empty. They are also listed in a
// file of the pod network's subnet, so that the next holder of the subnet
// removes what a crashed run left.
type mountPoints struct {
	mu      sync.Mutex
	file    string
	created []string
}

// loadMountPoints returns the mount points of file, those a run that did
// not reach Stop left behind, to remove.
func loadMountPoints(file string) *mountPoints {
	m := &mountPoints{file: file}
	if b, err := os.ReadFile(file); err == nil {
		m.created = strings.Fields(string(b))
	}
	return m
}

// ensure makes target exist, as a directory, or as a file when src is one.
func (m *mountPoints) ensure(src, target string) error {
	fi, err := os.Stat(src)
	if err != nil {
		return err
	}
	if _, err := os.Lstat(target); err == nil {
		return nil
	}
	// Record each missing ancestor, outermost first, to remove later.
	var missing []string
	for p := filepath.Dir(target); p != "/"; p = filepath.Dir(p) {
		if _, err := os.Lstat(p); err == nil {
			break
		}
		missing = append([]string{p}, missing...)
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return err
	}
	if fi.IsDir() {
		err = os.Mkdir(target, 0o755)
	} else {
		var f *os.File
		if f, err = os.OpenFile(target, os.O_CREATE|os.O_EXCL, 0o644); err == nil {
			f.Close()
		}
	}
	if err != nil && !os.IsExist(err) {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.created = append(m.created, missing...)
	m.created = append(m.created, target)
	return m.save()
}

func (m *mountPoints) save() error {
	if m.file == "" {
		return nil
	}
	return os.WriteFile(m.file, []byte(strings.Join(m.created, "\n")+"\n"), 0o600)
}

// removeAll removes the created mount points, innermost first; one that
// is not empty (something else wrote there) stays.
func (m *mountPoints) removeAll(log *slog.Logger) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := len(m.created) - 1; i >= 0; i-- {
		p := m.created[i]
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Size() > 0 {
			continue
		}
		if err := os.Remove(p); err != nil && !os.IsNotExist(err) && !strings.Contains(err.Error(), "not empty") {
			log.Debug("node agent: removing a mount point", "path", p, "err", err)
		}
	}
	m.created = nil
	if m.file != "" {
		_ = os.Remove(m.file)
	}
}
