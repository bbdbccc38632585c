package preempt

import (
	"errors"
	"os"
	"testing"
)

// Not parallel: the cases set the process's environment.
func TestInClusterClientWithoutCredentials(t *testing.T) {
	const tokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"
	tests := []struct {
		name       string
		host, port string
	}{
		{"outside a cluster", "", ""},
		{"in a cluster without a mounted token", "10.96.0.1", "443"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := os.Stat(tokenFile); err == nil && tt.host != "" {
				t.Skip("this machine has a service-account token")
			}
			t.Setenv("KUBERNETES_SERVICE_HOST", tt.host)
			t.Setenv("KUBERNETES_SERVICE_PORT", tt.port)
			client, err := InClusterClient()
			if !errors.Is(err, ErrNoCredentials) {
				t.Errorf("InClusterClient() = %v, %v; want ErrNoCredentials", client, err)
			}
		})
	}
}
