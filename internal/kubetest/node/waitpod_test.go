package node_test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Waiting for a pod's deletion ends at once when the pod is gone before
// the watch lists: no event will ever come for it.
func TestWaitingForAPodAlreadyGoneEndsAtOnce(t *testing.T) {
	c := testCluster(t)
	ns := namespace(t, c)
	createPod(t, c, pod(ns, "gone", shell("main", `sleep 100`)))
	waitPod(t, c, ns, "gone", time.Minute, "Running", running)
	if err := c.client.CoreV1().Pods(ns).Delete(t.Context(), "gone", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.client.CoreV1().Pods(ns).Get(t.Context(), "gone", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("get the pod deleted with grace 0: %v, want not found", err)
	}
	waitPod(t, c, ns, "gone", 10*time.Second, "deleted", func(p *corev1.Pod) bool { return p == nil })
}
