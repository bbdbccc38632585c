package node

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

func TestRestartAfterDecidesAsTheKubelet(t *testing.T) {
	exits42 := []corev1.ContainerRestartRule{{Action: corev1.ContainerRestartRuleActionRestart,
		ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}}}}
	notExits0or1 := []corev1.ContainerRestartRule{{Action: corev1.ContainerRestartRuleActionRestart,
		ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpNotIn, Values: []int32{0, 1}}}}
	own := func(p corev1.ContainerRestartPolicy, rules ...corev1.ContainerRestartRule) corev1.Container {
		return corev1.Container{RestartPolicy: ptr.To(p), RestartPolicyRules: rules}
	}
	for _, tc := range []struct {
		name string
		kind kind
		spec corev1.Container
		pod  corev1.RestartPolicy
		code int32
		want bool
	}{
		{"Always restarts a success", regularKind, corev1.Container{}, corev1.RestartPolicyAlways, 0, true},
		{"Always restarts a failure", regularKind, corev1.Container{}, corev1.RestartPolicyAlways, 1, true},
		{"an unset pod policy is Always", regularKind, corev1.Container{}, "", 0, true},
		{"OnFailure restarts a failure", regularKind, corev1.Container{}, corev1.RestartPolicyOnFailure, 3, true},
		{"OnFailure leaves a success", regularKind, corev1.Container{}, corev1.RestartPolicyOnFailure, 0, false},
		{"OnFailure restarts a kill", regularKind, corev1.Container{}, corev1.RestartPolicyOnFailure, 137, true},
		{"Never leaves a failure", regularKind, corev1.Container{}, corev1.RestartPolicyNever, 1, false},
		{"a container's Never overrides the pod's Always", regularKind, own(corev1.ContainerRestartPolicyNever), corev1.RestartPolicyAlways, 1, false},
		{"a container's OnFailure overrides the pod's Always", regularKind, own(corev1.ContainerRestartPolicyOnFailure), corev1.RestartPolicyAlways, 0, false},
		{"a container's Always overrides the pod's Never", regularKind, own(corev1.ContainerRestartPolicyAlways), corev1.RestartPolicyNever, 0, true},
		{"a rule In its exit codes restarts", regularKind, own(corev1.ContainerRestartPolicyNever, exits42...), corev1.RestartPolicyNever, 42, true},
		{"an exit code no rule names falls back to the container's policy", regularKind, own(corev1.ContainerRestartPolicyNever, exits42...), corev1.RestartPolicyAlways, 43, false},
		{"a rule NotIn its exit codes restarts the others", regularKind, own(corev1.ContainerRestartPolicyNever, notExits0or1...), corev1.RestartPolicyNever, 2, true},
		{"a rule NotIn its exit codes leaves those", regularKind, own(corev1.ContainerRestartPolicyNever, notExits0or1...), corev1.RestartPolicyNever, 1, false},
		{"an init container that succeeded is done even under Always", initKind, corev1.Container{}, corev1.RestartPolicyAlways, 0, false},
		{"an init container that failed is retried under OnFailure", initKind, corev1.Container{}, corev1.RestartPolicyOnFailure, 1, true},
		{"an init container that failed is not retried under Never", initKind, corev1.Container{}, corev1.RestartPolicyNever, 1, false},
		{"an init container's own Never overrides the pod's Always", initKind, own(corev1.ContainerRestartPolicyNever), corev1.RestartPolicyAlways, 1, false},
		{"a sidecar always restarts", sidecarKind, own(corev1.ContainerRestartPolicyAlways), corev1.RestartPolicyNever, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := newContainer(tc.spec, tc.kind).restartAfter(tc.code, tc.pod); got != tc.want {
				t.Errorf("restartAfter(%d, %q) = %v, want %v", tc.code, tc.pod, got, tc.want)
			}
		})
	}
}
