package preempt

import (
	"errors"
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// ErrNoCredentials is returned by InClusterClient when the pod has no
// service-account credentials: it does not run in a cluster, or its service
// account token is not mounted (automountServiceAccountToken: false).
var ErrNoCredentials = errors.New("preempt: no in-cluster service-account credentials")

// userAgent names the sidecar in the API server's audit log.
const userAgent = "ringside-sidecar"

// InClusterClient returns a clientset that authenticates as the pod's service
// account. If the pod has none, the error wraps ErrNoCredentials, and the
// sidecar should say once that the node taint watch is off and rely on
// SIGTERM.
func InClusterClient() (kubernetes.Interface, error) {
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoCredentials, err)
	}
	cfg.UserAgent = userAgent
	// Protobuf decodes a Node, with its long image list, in a fraction of
	// the time and garbage that JSON needs.
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("preempt: build in-cluster client: %w", err)
	}
	return client, nil
}
