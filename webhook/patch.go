package webhook

import (
	"encoding/json"
	"fmt"

	"gomodules.xyz/jsonpatch/v2"
	corev1 "k8s.io/api/core/v1"
)

// Patch returns the JSON patch (RFC 6902) that injects pod, nil when the
// pod is left alone (skipped says why).
func Patch(pod *corev1.Pod, namespace string, cfg Config) (patch []byte, skipped Skipped, err error) {
	out, skipped, err := Inject(pod, namespace, cfg)
	if err != nil || out == nil {
		return nil, skipped, err
	}
	before, err := json.Marshal(pod)
	if err != nil {
		return nil, "", fmt.Errorf("encode the pod: %w", err)
	}
	after, err := json.Marshal(out)
	if err != nil {
		return nil, "", fmt.Errorf("encode the injected pod: %w", err)
	}
	ops, err := jsonpatch.CreatePatch(before, after)
	if err != nil {
		return nil, "", fmt.Errorf("diff the injected pod: %w", err)
	}
	patch, err = json.Marshal(ops)
	if err != nil {
		return nil, "", fmt.Errorf("encode the patch: %w", err)
	}
	return patch, "", nil
}
