package node

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

// postLoop posts the status whenever it changed, until ctx ends.
func (w *podWorker) postLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.dirty:
			w.post(ctx)
		}
	}
}

// post writes the pod's status as it is now onto the newest object.
func (w *podWorker) post(ctx context.Context) {
	if w.noAPI.Load() || w.objGone.Load() {
		return
	}
	w.postMu.Lock()
	defer w.postMu.Unlock()
	pods := w.a.client.CoreV1().Pods(w.spec.Namespace)
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		p, err := pods.Get(ctx, w.spec.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.UID != w.uid {
			return nil
		}
		p.Status = w.status()
		_, err = pods.UpdateStatus(ctx, p, metav1.UpdateOptions{})
		return err
	})
	if err != nil && ctx.Err() == nil && !apierrors.IsNotFound(err) {
		w.a.log.Warn("node agent: posting pod status", "pod", w.spec.Namespace+"/"+w.spec.Name, "err", err)
	}
}

// status is the pod's status as the kubelet would report it now.
func (w *podWorker) status() corev1.PodStatus {
	w.mu.Lock()
	defer w.mu.Unlock()
	hostIP := w.a.cfg.Network.HostIP()
	st := corev1.PodStatus{
		Phase:     w.phase,
		HostIP:    hostIP,
		HostIPs:   []corev1.HostIP{{IP: hostIP}},
		StartTime: &w.startTime,
		QOSClass:  w.latest.Status.QOSClass,
	}
	if w.att != nil {
		st.PodIP = w.att.IP
		st.PodIPs = []corev1.PodIP{{IP: w.att.IP}}
	}
	allReady := true
	for _, c := range w.containers {
		cs := c.status(w.unrunnable, w.initialized)
		if c.kind == regularKind {
			st.ContainerStatuses = append(st.ContainerStatuses, cs)
		} else {
			st.InitContainerStatuses = append(st.InitContainerStatuses, cs)
		}
		if (c.kind != initKind && !cs.Ready) || (c.kind == initKind && !w.initialized) {
			allReady = false
		}
	}
	if w.phase != corev1.PodRunning {
		allReady = false
	}
	st.Conditions = []corev1.PodCondition{
		w.condition(corev1.PodReadyToStartContainers, w.att != nil, ""),
		w.condition(corev1.PodInitialized, w.initialized, "ContainersNotInitialized"),
		w.condition(corev1.ContainersReady, allReady, "ContainersNotReady"),
		w.condition(corev1.PodReady, allReady, "ContainersNotReady"),
		w.condition(corev1.PodScheduled, true, ""),
	}
	if w.unrunnable != nil {
		st.Message = w.unrunnable.Error()
	}
	return st
}

// condition keeps each condition's transition time across posts.
func (w *podWorker) condition(t corev1.PodConditionType, ok bool, reason string) corev1.PodCondition {
	s := corev1.ConditionFalse
	if ok {
		s, reason = corev1.ConditionTrue, ""
	}
	if c, seen := w.conds[t]; seen && c.Status == s {
		return c
	}
	c := corev1.PodCondition{Type: t, Status: s, Reason: reason, LastTransitionTime: metav1.Now()}
	w.conds[t] = c
	return c
}

// status is the container's ContainerStatus.
func (c *container) status(unrunnable error, initialized bool) corev1.ContainerStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	cs := corev1.ContainerStatus{
		Name: c.spec.Name, Image: c.spec.Image, ImageID: "kubetest://" + c.spec.Image,
		RestartCount: c.restarts, Started: ptr.To(c.started),
		Ready: c.running != nil && c.ready,
	}
	switch {
	case c.running != nil:
		cs.State.Running = &corev1.ContainerStateRunning{StartedAt: *c.running}
	case c.term != nil:
		cs.State.Terminated = c.term.DeepCopy()
		cs.ContainerID = c.term.ContainerID
		cs.Ready = c.kind == initKind && c.term.ExitCode == 0
	default:
		reason, msg := c.waiting, c.waitMsg
		switch {
		case unrunnable != nil && reason == "":
			reason, msg = "CreateContainerConfigError", unrunnable.Error()
		case reason == "" && c.kind == regularKind && !initialized:
			reason = "PodInitializing"
		case reason == "":
			reason = "ContainerCreating"
		}
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: reason, Message: msg}
	}
	if c.last != nil {
		cs.LastTerminationState.Terminated = c.last.DeepCopy()
	}
	return cs
}
